"""Per-example clipping without per-example gradients: mixed ghost norms and book-keeping.

One forward and one backward of the summed per-example losses give, for every
layer, its inputs ``a`` (B, T, d_in) and output gradients ``g`` (B, T, d_out);
the backward computes no parameter gradient (``torch.autograd.grad`` is asked
for the layer outputs only). Every parameter's per-example gradient is a
function of these:

* linear layer (and the patch-embedding convolution, a linear map of its
  unfolded patches): ``G_i = sum_t g_it a_it^T``. Its squared norm is either
  the *ghost norm* ``sum_{t,s} (g_it . g_is)(a_it . a_is)`` (Goodfellow 2015;
  Li et al. 2022), costing B T^2 (d_in + d_out), or the norm of the
  instantiated ``G_i``, costing B T d_in d_out; each layer takes the cheaper
  of the two from its shapes (mixed ghost clipping, Bu et al. 2022).
  Bias: ``sum_t g_it``;
* LayerNorm: ``sum_t g_it * xhat_it`` (weight) and ``sum_t g_it`` (bias),
  instantiated (B, D);
* token parameters of the root module (``cls_token``, ``mask_token``; position
  embeddings when trained), broadcast over the batch by the model: replaced
  for the pass by a per-example copy (B, ...), whose gradient *is* the
  per-example gradient.

With the per-example norms ``n_i`` (all parameters together) and clip factors
``c_i = min(1, C / (n_i + 1e-6))`` the clipped sum of each linear weight is
``sum_i c_i G_i = sum_{i,t} (c_i g_it) a_it^T``: one GEMM per layer, the same
cost as a non-private weight gradient (book-keeping, Bu et al. 2023).

The result equals ``vmap(grad)`` + :func:`backbones.mae.per_example.clip_and_sum`
(tests: relative error <= 1e-5 in float32). Any module holding a trainable
parameter that this file does not know is refused with an error naming it:
use the vmap path there. Sums are computed in float32 from the tensors the
pass produced, so each example's clipped contribution is at most C in the
arithmetic actually used for the sum, up to float32 rounding. Norms are
float32 (float64 for the accumulation), also under bf16 autocast, where
bf16 norms are the less exact choice and not the faster one (BENCHMARKS.md,
"DP-MAE under bf16: float32 or bf16 norms"). On request
(``low_precision_norms=True``) they run in bf16 (the Gram matrices, and the
instantiated per-example weight gradients, which are then normed and summed
as that same bf16 tensor), and each bf16 ghost norm is inflated by a rigorous
bound on its rounding error (:func:`low_precision_gram_bound`), so it never
under-estimates the norm of what is summed and the clip stays conservative
(an over-estimate costs that fraction of C, never more than C).
"""
from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

from .clipping import clip_factors, dropped, weighted_sum, zero_rows
from .errors import UnsupportedModuleError

__all__ = ["ghost_clip_and_sum", "check_supported", "UnsupportedModuleError", "layer_plan", "low_precision_gram_bound"]

_SUPPORTED = (nn.Linear, nn.Conv2d, nn.LayerNorm)
_SMALL = 4096  # per-example gradients up to this size are normed and summed together


def _own_trainable(module: nn.Module) -> dict:
    return {k: p for k, p in module.named_parameters(recurse=False) if p.requires_grad}


def check_supported(model: nn.Module) -> None:
    """Raise :class:`UnsupportedModuleError` unless every trainable parameter is one the fast path clips exactly."""
    _trainable_modules(model)


def _trainable_modules(model: nn.Module) -> dict:
    """{name: module} of the modules holding trainable parameters (root excluded), checked (one pass)."""
    from .model import MaskedAutoencoder

    if not isinstance(model, MaskedAutoencoder):
        raise UnsupportedModuleError(f"ghost clipping knows the token parameters of MaskedAutoencoder only, got "
                                     f"{type(model).__name__}; use per_example='vmap'")
    for method in ("forward", "forward_encoder", "forward_decoder"):  # where the tokens are broadcast over the batch
        if getattr(type(model), method) is not getattr(MaskedAutoencoder, method):
            raise UnsupportedModuleError(f"{type(model).__name__} overrides MaskedAutoencoder.{method}, whose use of "
                                         f"the tokens ghost clipping relies on; use per_example='vmap'")
    found = {}
    for name, module in model.named_modules():
        own = _own_trainable(module)
        if not own or module is model:
            continue
        found[name] = module
        if not isinstance(module, _SUPPORTED):
            raise UnsupportedModuleError(
                f"ghost clipping does not know {type(module).__name__} ({name!r}, parameters {sorted(own)}); "
                f"use per_example='vmap'")
        if isinstance(module, nn.LayerNorm) and len(module.normalized_shape) != 1:
            raise UnsupportedModuleError(f"ghost clipping supports LayerNorm over the last dimension only ({name!r}); "
                                         f"use per_example='vmap'")
        if isinstance(module, nn.Conv2d) and (module.groups != 1 or module.padding_mode != "zeros"
                                              or isinstance(module.padding, str)):
            raise UnsupportedModuleError(f"ghost clipping supports Conv2d with groups=1 and numeric zero padding "
                                         f"only ({name!r}); use per_example='vmap'")
    for name, p in _own_trainable(model).items():
        if p.shape[0] != 1:
            raise UnsupportedModuleError(f"root parameter {name!r} of shape {tuple(p.shape)} is not a token "
                                         f"broadcast over the batch; use per_example='vmap'")
    return found


def layer_plan(t: int, d_in: int, d_out: int) -> str:
    """``"ghost"`` when the ghost norm is cheaper than instantiating the per-example weight gradient.

    Ghost: two (T x T) Gram matrices per example, T^2 (d_in + d_out) multiply-adds;
    instantiation: T d_in d_out. (Mixed ghost clipping, Bu et al. 2022.)
    """
    return "ghost" if t * (d_in + d_out) < d_in * d_out else "instantiate"


def _as_tokens(x: torch.Tensor, b: int, name: str, float32: bool = True) -> torch.Tensor:
    if x.shape[0] != b:
        raise UnsupportedModuleError(f"{name!r} was called on a tensor whose first dimension {x.shape[0]} is not "
                                     f"the batch {b}; use per_example='vmap'")
    x = x.reshape(b, -1, x.shape[-1])
    return x.float() if float32 else x


def _linear_io(module, a, g, b, name):
    """(B, T, d_in) inputs and (B, T, d_out) output gradients of a linear map (Conv2d: its patches), in the dtypes
    the pass produced them (bf16 under autocast: kept so, not copied to float32; every use below computes in
    float32 from these exact values)."""
    if isinstance(module, nn.Conv2d):
        a = F.unfold(a.float(), module.kernel_size, module.dilation, module.padding, module.stride)
        return a.transpose(1, 2), g.flatten(2).transpose(1, 2)
    return _as_tokens(a, b, name, float32=False), _as_tokens(g, b, name, float32=False)


def _layernorm_xhat(module: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    """The normalized input of a LayerNorm (before its affine map), recomputed in float32."""
    return F.layer_norm(x.float(), module.normalized_shape, None, None, module.eps)


#: Unit roundoff of the low-precision dtypes the norms may run in (p significant bits: 2^-p), and of float32.
_UNIT_ROUNDOFF = {torch.bfloat16: 2.0 ** -8}
_U32 = 2.0 ** -24


def low_precision_gram_bound(d: int, dtype: torch.dtype = torch.bfloat16) -> float:
    """``gamma``: a Gram matrix computed in ``dtype`` is within ``gamma ||x_t|| ||x_s||`` of the exact one.

    The Gram matrix of ``x`` (T x d, float32 values) computed from ``x`` rounded to ``dtype`` (unit roundoff u),
    its products (exact in float32) accumulated in float32 over d terms and the result rounded to ``dtype`` (or
    kept in float32): ``gamma = (1+u)^3 (1 + 2 d u32 / (1 - 2 d u32)) - 1`` (the error of a dot product, Higham,
    *Accuracy and Stability*, 3.1, with ``sum_k |x_tk x_sk| <= ||x_t|| ||x_s||``; 2 u32 per addition also covers
    accumulators that truncate, as GPU matrix units may). bf16: about 3u = 0.012.
    """
    u = _UNIT_ROUNDOFF[dtype]
    return (1 + u) ** 3 * (1 + 2 * d * _U32 / (1 - 2 * d * _U32)) - 1


def _ghost_bound(a: torch.Tensor, g: torch.Tensor, gram_a: torch.Tensor, gram_g: torch.Tensor,
                 dtype: torch.dtype) -> torch.Tensor:
    """An upper bound on how far the ghost norm from low-precision Gram matrices ``gram_a``, ``gram_g`` (float32)
    can fall below the exact ``sum_ts A_ts G_ts``: (B,), float64.

    With ``|gram_a - A| <= ga Na``, ``Na_ts = ||a_t|| ||a_s||`` (:func:`low_precision_gram_bound`), likewise for g,
    ``|sum gram_a gram_g - sum A G| <= ga sum Na |gram_g| + gg sum |gram_a| Ng + 3 ga gg S^2`` with
    ``S = sum_t ||a_t|| ||g_t||`` (``sum Na Ng = S^2``). The row norms are float32, each at least ``(1 - eta)``
    of the exact one, ``eta = (d_in + d_out + T + 4) u32``, which also covers the float64 sums; dividing by
    ``(1 - eta)^2`` makes the bound hold for the exact norms. Much tighter than ``gamma S^2`` where the tokens'
    gradients are far from parallel (``S^2`` up to T times the squared norm).
    """
    t, d_in, d_out = a.shape[1], a.shape[2], g.shape[2]
    ga, gg = low_precision_gram_bound(d_in, dtype), low_precision_gram_bound(d_out, dtype)
    na, ng = torch.linalg.vector_norm(a, dim=2).double(), torch.linalg.vector_norm(g, dim=2).double()
    outer_a, outer_g = (na[:, :, None] * na[:, None, :]).flatten(1), (ng[:, :, None] * ng[:, None, :]).flatten(1)
    s = (na * ng).sum(1)
    first = ga * torch.linalg.vecdot(outer_a, gram_g.flatten(1).double().abs())
    second = gg * torch.linalg.vecdot(gram_a.flatten(1).double().abs(), outer_g)
    eta = (d_in + d_out + t + 4) * _U32
    return (first + second + 3 * ga * gg * s.square()) / (1 - eta) ** 2


def _gram(x: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """``x x^T`` per example, float32 accumulation and result.

    ``dtype`` None: from ``x``'s own values (float32, or the bf16 an autocast produced, whose products are exact in
    float32). ``dtype`` given (low-precision norms): from ``x`` rounded to it, as bounded above.
    """
    if dtype is not None:
        x = x.to(dtype)
    if x.dtype != torch.float32 and x.is_cuda:  # cuBLAS: low-precision inputs, float32 accumulation and output
        with contextlib.suppress(TypeError, NotImplementedError):
            return torch.bmm(x, x.transpose(1, 2), out_dtype=torch.float32)
    if dtype is None:
        x = x.float()
    return torch.bmm(x, x.transpose(1, 2)).float()


#: Relative error bound of an operand rounded to TF32 (10 explicit significand bits): 2^-10 covers truncation as
#: well as rounding to nearest (and cuBLAS' bf16x3 splitting, which is more exact).
_U_TF32 = 2.0 ** -10


def tf32_sum_bound() -> float:
    """``gamma``: a book-keeping GEMM on TF32 inputs moves each example's contribution by at most ``gamma c_i S_i``.

    Each of the two operands (the scaled ``c_i g_it``, itself rounded to float32, and ``a_it``) is rounded to TF32,
    so each token's ``x' y'^T`` is within ``((1 + u)^2 (1 + u32) - 1) |x| |y|`` of ``c_i g_it a_it^T`` (the
    products of TF32 values are exact in float32); summed over tokens, ``S_i = sum_t ||g_it|| ||a_it||``. The float32
    accumulation is the sum's own rounding, as in the float32 GEMM.
    """
    return (1 + _U_TF32) ** 2 * (1 + _U32) - 1


def _book_keeping_mm(x: torch.Tensor, y: torch.Tensor, tf32: bool) -> torch.Tensor:
    """``x^T y`` in float32; with ``tf32`` on CUDA, on TF32 tensor cores (inputs rounded, :func:`tf32_sum_bound`)."""
    if not (tf32 and x.is_cuda):
        return x.t() @ y
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        return x.t() @ y
    finally:
        torch.set_float32_matmul_precision(before)


def _sq(x: torch.Tensor) -> torch.Tensor:
    """Squared L2 norm of each example's slice: (B,), float64."""
    return torch.linalg.vector_norm(x.reshape(x.shape[0], -1).float(), dim=1).double().square()


class _Layer:
    """One trainable supported module during a pass: its recorded inputs and what its output grads gave."""

    def __init__(self, name: str, module: nn.Module, norm_dtype: torch.dtype | None = None):
        self.name, self.module, self.norm_dtype = name, module, norm_dtype
        self.inputs: list = []  # per call, dropped once that call's output grad is processed
        self.tokens: list = []  # per call: T (positions per example) of its output
        self.pending = 0  # calls whose output grad has not been processed yet
        self._plan = None
        self.pieces: list = []  # ghost: (a, g) per call, (B, T, d), in the dtypes the pass produced
        self.per_example: dict = {}  # parameter name -> per-example gradients (B, *shape), summed over calls

    def trainable(self, kind: str) -> bool:
        p = getattr(self.module, kind, None)
        return p is not None and p.requires_grad

    @property
    def plan(self) -> str:
        """``"ghost"`` or ``"instantiate"`` for a linear map, from T over all its calls (known once the forward ran)."""
        if self._plan is None:
            w = self.module.weight
            self._plan = layer_plan(sum(self.tokens), w[0].numel(), w.shape[0])
        return self._plan

    def add(self, key: str, pe: torch.Tensor) -> None:
        self.per_example[key] = pe if key not in self.per_example else self.per_example[key] + pe

    def process(self, call: int, g: torch.Tensor, b: int) -> None:
        """Consume the output grad of one call: per-example gradients or ghost pieces; free the input."""
        a, self.inputs[call] = self.inputs[call], None
        self.pending -= 1
        m = self.module
        if isinstance(m, nn.LayerNorm):
            g = _as_tokens(g, b, self.name)
            if self.trainable("weight"):
                self.add("weight", (g * _as_tokens(_layernorm_xhat(m, a), b, self.name)).sum(1))
        else:
            a, g = _linear_io(m, a, g, b, self.name)
            if self.trainable("weight"):
                if self.plan == "ghost":
                    self.pieces.append((a, g))
                elif self.norm_dtype is None:  # instantiate: (B, d_out, d_in), never larger than the (a, g) it replaces
                    self.add("weight", torch.bmm(g.transpose(1, 2).float(), a.float()))
                else:  # the same in the norm dtype: its norm and its clipped sum are of this very tensor
                    self.add("weight", torch.bmm(g.transpose(1, 2).to(self.norm_dtype), a.to(self.norm_dtype)))
        if self.trainable("bias"):
            self.add("bias", g.sum(1, dtype=torch.float32))

    def ghost_sq_norms(self) -> torch.Tensor | None:
        """Squared per-example norms of the weight gradient from the ghost pieces (None when not ghost).

        In float32 (from the pieces' own values, exact in float32 also where an autocast made them bf16), exact
        to float32 rounding. In ``norm_dtype`` (bf16), the Gram matrices run in it and the
        result is inflated by its error bound (:func:`_ghost_bound`): never below the squared norm of the gradient
        that :meth:`ghost_weight_sum` sums (in float32), so clipping with it stays conservative.
        """
        if not self.pieces:
            return None
        a = torch.cat([x for x, _ in self.pieces], 1) if len(self.pieces) > 1 else self.pieces[0][0]
        g = torch.cat([y for _, y in self.pieces], 1) if len(self.pieces) > 1 else self.pieces[0][1]
        if self.norm_dtype is None:
            gram_a, gram_g = _gram(a, None), _gram(g, None)
            return torch.linalg.vecdot(gram_a.flatten(1), gram_g.flatten(1)).double()
        a, g = a.float(), g.float()  # the bound's row norms in float32
        gram_a, gram_g = _gram(a, self.norm_dtype), _gram(g, self.norm_dtype)
        ghost = torch.linalg.vecdot(gram_a.flatten(1).double(), gram_g.flatten(1).double())
        return ghost + _ghost_bound(a, g, gram_a, gram_g, self.norm_dtype)

    def token_norm_products(self) -> torch.Tensor | None:
        """``S_i = sum_t ||g_it|| ||a_it||`` over every call (None when not ghost): (B,), float64, never below the
        exact value (float32 row norms, each at least ``1 - eta`` of the exact one, as in :func:`_ghost_bound`)."""
        if not self.pieces:
            return None
        out = 0
        for a, g in self.pieces:
            t, d_in, d_out = a.shape[1], a.shape[2], g.shape[2]
            na = torch.linalg.vector_norm(a.float(), dim=2).double()
            ng = torch.linalg.vector_norm(g.float(), dim=2).double()
            out = out + (na * ng).sum(1) / (1 - (d_in + d_out + t + 4) * _U32) ** 2
        return out

    def ghost_weight_sum(self, scale: torch.Tensor, rows: torch.Tensor | None = None,
                         tf32: bool = False) -> torch.Tensor:
        """Book-keeping: ``sum_i c_i G_i`` as one GEMM per call with output grads scaled by ``c_i``; the examples
        in ``rows`` (dropped: non-finite) zeroed in both factors first, so that none of their values reaches the
        sum (``0 * nan`` would)."""
        out = 0
        for a, g in self.pieces:
            a, g = zero_rows(a, rows), zero_rows(g, rows)
            if a.shape[2] < g.shape[2]:  # scale the narrower of the two (float32: bf16 times float32 promotes)
                a = a * scale.view(-1, 1, 1)
            else:
                g = g * scale.view(-1, 1, 1)
            out = out + _book_keeping_mm(g.reshape(-1, g.shape[2]).float(), a.reshape(-1, a.shape[2]).float(), tf32)
        return out.reshape(self.module.weight.shape)


def ghost_clip_and_sum(model: nn.Module, imgs: torch.Tensor, mask_noise: torch.Tensor, clip: float, *,
                       autocast_dtype: torch.dtype | None = None, low_precision_norms: bool = False,
                       tf32_sums: bool = False):
    """Clipped per-example gradient sum of the MAE loss by mixed ghost norms + book-keeping.

    Parameters
    ----------
    model : MaskedAutoencoder
        Its parameters are used in place (no copy); ``.grad`` is not touched.
    imgs : torch.Tensor, shape (B, C, H, W)
    mask_noise : torch.Tensor, shape (B, L)
        One row per example (each example's own mask).
    clip : float
        C > 0.
    autocast_dtype : torch.dtype or None
        Run the forward under ``torch.autocast`` with this dtype (e.g. bfloat16 on CUDA).
    low_precision_norms : bool
        Compute the norms in bfloat16 (Gram matrices and instantiated per-example weight gradients) instead of
        float32 (default: float32 norms, also under bf16 autocast, the more exact choice and not the slower one;
        see the module's docstring). bf16 ghost norms are inflated by a stated bound
        (``_ghost_bound``) so that they never under-estimate; an instantiated gradient is normed and summed as
        the same bf16 tensor. Either way each clipped contribution is at most C up to float32 rounding. Sums
        stay float32.
    tf32_sums : bool
        On CUDA, run the book-keeping GEMMs of the ghost layers on TF32 tensor cores (float32 accumulation and
        output) and inflate each example's norm by ``tf32_sum_bound() * sqrt(sum_l S_l^2)``
        (:meth:`_Layer.token_norm_products`), so that its contribution, rounding included, stays at most C.
        Default False: float32 GEMMs need no inflation. Off CUDA only the (conservative) inflation applies.

    Returns
    -------
    summed : dict[str, torch.Tensor]
        ``sum_i c_i grad_i`` per trainable parameter, float32, each of the parameter's shape.
    norms : torch.Tensor, shape (B,)
        Per-example gradient norms before clipping (float32; the ones the clip used: inflated by the stated bounds
        with ``low_precision_norms`` or ``tf32_sums``). An example whose norm or loss is not finite (a NaN
        or an overflow in its image) contributed exactly nothing to ``summed``, as a null image would.
    losses : torch.Tensor, shape (B,)
    """
    norm_dtype = torch.bfloat16 if low_precision_norms else None
    layers = {name: _Layer(name, m, norm_dtype) for name, m in _trainable_modules(model).items()}
    b, device = imgs.shape[0], imgs.device
    tokens = {k: p.detach().expand(b, *p.shape[1:]).clone().requires_grad_(True)
              for k, p in _own_trainable(model).items()}

    # Output grads are consumed by tensor hooks as the backward produces them (instantiated layers keep
    # (B, d_out, d_in), not their activations); outputs are not held (that would keep activations autograd
    # frees). The backward is asked for the token copies and for the outputs of calls whose input needs no grad
    # (the patch embedding): every other layer lies on a path to those, and no parameter gradient is computed.
    no_amp = torch.autocast(device.type, enabled=False)
    wanted, wanted_at = [], []

    def on_forward(layer):
        def hook(module, args, output):
            x = args[0]
            call = len(layer.inputs)
            layer.inputs.append(x.detach())
            layer.tokens.append(output.shape[2] * output.shape[3] if isinstance(module, nn.Conv2d)
                                else output[0].numel() // output.shape[-1])
            if not output.requires_grad:
                layer.inputs[call] = None
                return
            layer.pending += 1
            if x.requires_grad:
                def tensor_hook(g):
                    with no_amp:
                        layer.process(call, g, b)
                output.register_hook(tensor_hook)
            else:
                wanted.append(output)
                wanted_at.append((layer, call))
        return hook

    handles = [layer.module.register_forward_hook(on_forward(layer)) for layer in layers.values()]
    amp = torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype is not None else contextlib.nullcontext()
    try:
        with amp:
            losses = functional_call(model, tokens, (imgs, mask_noise), strict=False)
    finally:
        for h in handles:
            h.remove()
    n_wanted = len(wanted)
    grads = torch.autograd.grad(losses.sum(), wanted + list(tokens.values()), allow_unused=True)
    del wanted

    with no_amp:
        for (layer, call), g in zip(wanted_at, grads[:n_wanted]):
            if g is not None:
                layer.process(call, g, b)
        unreached = [layer.name for layer in layers.values() if layer.pending]
        if unreached:
            raise UnsupportedModuleError(f"the backward did not reach the output of {unreached[:3]} (a module whose "
                                         f"output does not depend on the images or tokens?); use per_example='vmap'")
        small = {}  # parameter name -> per-example gradients (B, *shape)
        for layer in layers.values():
            small.update({f"{layer.name}.{k}": pe for k, pe in layer.per_example.items()})
        for k, g in zip(tokens, grads[n_wanted:]):
            if g is not None:
                small[k] = g.float()

        # the small per-example gradients (biases, LayerNorm, tokens) side by side: one norm and one weighted sum
        # for all of them; instantiated weights (B, d_out, d_in) each on their own (a copy would cost more)
        big = {k: pe for k, pe in small.items() if pe[0].numel() > _SMALL}
        small = {k: pe for k, pe in small.items() if k not in big}
        flat = (torch.cat([pe.reshape(b, -1).float() for pe in small.values()], 1) if small
                else torch.zeros(b, 0, device=device))  # only weight matrices trainable: nothing small
        sq = _sq(flat)
        for pe in big.values():
            sq += _sq(pe)
        for layer in layers.values():
            ghost = layer.ghost_sq_norms()
            if ghost is not None:
                sq += ghost.double()
        norms = sq.sqrt()
        if tf32_sums:  # each ghost layer's rounding moves a contribution by <= gamma c S_l: sqrt(sum_l S_l^2) in all
            s2 = sum(s.square() for s in (layer.token_norm_products() for layer in layers.values()) if s is not None)
            norms = norms + tf32_sum_bound() * torch.as_tensor(s2, dtype=torch.float64, device=device).sqrt()
        norms = norms.float()
        scale = clip_factors(norms, clip, torch.isfinite(losses.detach()))  # non-finite examples: 0
        rows = dropped(scale)

        params = dict(model.named_parameters())
        flat_sum = weighted_sum(scale, flat, rows)
        summed, at = {}, 0
        for k, pe in small.items():
            n = pe[0].numel()
            summed[k] = flat_sum[at:at + n].reshape(params[k].shape)
            at += n
        for k, pe in big.items():
            summed[k] = weighted_sum(scale, pe.reshape(b, -1).float(), rows).reshape(params[k].shape)
        for layer in layers.values():
            if layer.pieces:
                summed[f"{layer.name}.weight"] = layer.ghost_weight_sum(scale, rows, tf32_sums)
    for name, p in params.items():  # a trainable parameter the loss never touched: zero gradient
        if p.requires_grad and name not in summed:
            summed[name] = torch.zeros_like(p, dtype=torch.float32)
    return summed, norms, losses.detach()


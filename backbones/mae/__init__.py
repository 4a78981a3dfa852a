"""DP-MAE: train the backbone itself with differential privacy (the ViP recipe, seeds 000/001).

A masked autoencoder on timm's ViT is pretrained on procedural images
(public, :mod:`.synthetic`), then trained with DP-AdamW on private images
(per-example clipping by mixed ghost norms and book-keeping, :mod:`.ghost`,
with ``torch.func`` per-example gradients as the reference; a secret
Poisson sample; noise once per logical step; accounting by
``privlin.accounting``). Its encoder, exported in the ViP layout, is a
backbone the registry loads; its provenance JSON carries the run's
dp-accounting event (:func:`.train.run_dp_event`).

::

    python -m backbones.mae.train --size vip_toy --data synthetic --steps 1500 --export vip_toy.pth
"""
from ..lazy import lazy_exports
from .config import MAE_SIZES, MAEConfig
from .errors import UnsupportedModuleError

#: Public name -> the module that defines it (torch-bound: loaded on first use, so the command line checks its
#: arguments before torch loads).
_LAZY = {**dict.fromkeys(("export_encoder", "load_checkpoint", "load_mae_weights", "save_checkpoint"), "checkpoint"),
         **dict.fromkeys(("digits_split", "make_source", "normalize"), "data"),
         **dict.fromkeys(("DPAccountantState", "PrivacyLeakWarning", "SecretStream", "poisson_sample",
                          "reduce_and_privatize"), "dp"),
         **dict.fromkeys(("MaskedAutoencoder", "build_mae", "encoder_from_mae", "encoder_state_dict"), "model"),
         "ghost_clip_and_sum": "ghost",
         **dict.fromkeys(("clip_and_sum", "clipped_grad_sum", "per_example_grads", "per_example_norms",
                          "split_params"), "per_example"),
         **dict.fromkeys(("ShaderImages", "render_shader"), "synthetic")}

__all__ = ["MAEConfig", "MAE_SIZES", "MaskedAutoencoder", "build_mae", "encoder_from_mae", "encoder_state_dict",
           "ShaderImages", "render_shader", "digits_split", "make_source", "normalize",
           "per_example_grads", "per_example_norms", "clip_and_sum", "split_params", "clipped_grad_sum",
           "ghost_clip_and_sum", "UnsupportedModuleError",
           "poisson_sample", "reduce_and_privatize", "DPAccountantState", "PrivacyLeakWarning", "SecretStream",
           "save_checkpoint", "load_checkpoint", "load_mae_weights", "export_encoder"]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)

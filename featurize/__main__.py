"""``featurize`` / ``python -m featurize``: extract frozen-backbone features of a dataset into a feature store.

Examples::

    featurize --backbone vip_toy --dataset digits
    featurize --backbone vip_base --head blocks --dataset imagenet --data-dir /data/imagenet \\
              --weights ckpt-vip-laion233m-base.pth --out feats/vip_base_blocks_imagenet.zarr
    torchrun --nproc-per-node 8 -m featurize --backbone vit_h14 --dataset imagenet --data-dir /data/imagenet

Rerunning the same command resumes a killed job; ``--shard i/n`` (or torchrun) splits one store across workers.
"""
from __future__ import annotations

import sys

import backbones
import cliconv as cli

PROG = "featurize"
#: ``featurize.decode.DECODE_MODES``, spelled here so that parsing needs no torch (a test holds the two equal).
DECODE_CHOICES = ("auto", "draft", "full", "device")


def user_errors() -> tuple:
    """The mistakes a user can make here (a dataset, a backbone's weights, the output store, an argument's value).

    Imported when a command runs, not when it is parsed (``--help`` and usage errors answer at once); none of them
    needs torch, so a mistake found before the heavy imports is reported at once too.
    """
    import pickle

    import stores

    from .names import CorruptImageError, DatasetError
    return (DatasetError, CorruptImageError, backbones.WeightsNotFoundError, backbones.CheckpointMismatchError,
            stores.StoreError, KeyError, ValueError, pickle.UnpicklingError, OSError)


def build_parser():
    p = cli.parser(PROG, __doc__, epilog="Backbones: " + ", ".join(backbones.list_backbones()) +
                   ", or any timm model name with pretrained weights (e.g. vit_base_patch16_224.augreg_in21k) or "
                   "hf-hub:ORG/NAME, loaded from the Hugging Face cache (HF_HUB_OFFLINE=1: never downloaded)")
    p.add_argument("--backbone", required=True,
                   help="registry name (vip_base, vit_b16_in21k, vip_toy, pixels), timm name or hf-hub:ORG/NAME")
    p.add_argument("--dataset", required=True, help="imagenet, cifar10, cifar100, digits, imagefolder:PATH, "
                                                    "webdataset (tar shards under --data-dir) or hf:PATH_OR_NAME")
    p.add_argument("--data-dir", default=None, help="root of imagenet / the CIFAR python release / the webdataset")
    p.add_argument("--split", default=None,
                   help="comma-separated splits (default: every split of the dataset)")
    p.add_argument("--head", default=None, help="cls, gap or blocks for ViTs (default: the backbone's first)")
    p.add_argument("--out", default=None, help="store path or fsspec URL (default features/<bb>_<head>_<ds>.zarr)")
    p.add_argument("--weights", default=None,
                   help=f"weights file (default ${backbones.WEIGHTS_DIR_ENV}/<registry file name>)")
    p.add_argument("--batch-size", type=cli.Interval(int, 1), default=256, help="images per forward pass")
    p.add_argument("--num-workers", type=cli.Interval(int, 0), default=None,
                   help="decoding processes (default min(8, cpus))")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    p.add_argument("--dtype", default="float16", choices=("float16", "float32"), help="stored feature dtype")
    p.add_argument("--shard", default=None, help="i/n: write every n-th store shard starting at i "
                                                 "(default: torchrun RANK/WORLD_SIZE, else 0/1)")
    p.add_argument("--shard-rows", type=cli.Interval(int, 1), default=None,
                   help="rows per store shard (default ~16 MiB shards)")
    p.add_argument("--skip-bad", action="store_true", help="record undecodable images as skipped rows")
    p.add_argument("--decode", default="auto", choices=DECODE_CHOICES,
                   help="draft: JPEGs at a reduced DCT scale (PIL); full: whole images; device: JPEGs decoded on "
                        "--device (nvJPEG on CUDA); auto: device on CUDA, else draft")
    p.add_argument("--feed", default=None, metavar="NAME=VALUE,...",
                   help="how batches are fed to the model (speed only, featurize.job.Feed): ahead=N batches "
                        "staged by a thread, decode_threads=N chunks per batch on the device, pin_bytes=0|1, "
                        "prefetch=N batches per worker (default ahead=0,decode_threads=1,pin_bytes=0,prefetch=4)")
    p.add_argument("--worker-every", type=cli.Interval(int, 0), default=0, metavar="N",
                   help="--decode device: every N-th row decoded by PIL in the workers beside the device "
                        "(N >= 2; recorded in the store)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def main(argv: list[str] | None = None) -> int:
    """What ``featurize`` runs: parse (``--help`` and usage errors exit here, before torch is imported), check the
    names and paths typed (a typo answers at once, before the heavy imports), then run, showing a moving line while
    torch and timm load and while the data is listed and the model built, until the first bar."""
    args = build_parser().parse_args(argv)
    code = cli.entry_point(PROG, (KeyError, ValueError, backbones.WeightsNotFoundError))(_check_names)(args)
    return code or cli.entry_point(PROG, user_errors())(_run)(args)


def _check_names(args) -> int:
    """The names and paths typed (dataset, backbone, its weights file, the data folders), checked without torch."""
    from .names import check_name, check_out

    check_name(args.dataset)
    backbones.check_name(args.backbone)
    if args.backbone in backbones.list_backbones():
        from backbones.weights_file import resolve_weights

        resolve_weights(backbones.get_config(args.backbone), args.weights)
    else:  # a timm or hub name: under HF_HUB_OFFLINE=1, its files in the Hugging Face cache
        from backbones.hub import check_cached

        check_cached(args.backbone, args.weights)
    check_out(args.out)
    if not args.dataset.startswith("hf:"):  # a hub dataset is found by the datasets library (heavy)
        from .datasets import dataset_splits

        dataset_splits(args.dataset, args.data_dir)  # its folders and their layout (reads only names)
    return 0


def _run(args) -> int:
    needs_timm = args.backbone not in backbones.list_backbones() or backbones.get_config(args.backbone).arch != "pixels"
    loading = "torch, torchvision and timm" if needs_timm else "torch and torchvision"
    with cli.status(f"{PROG}: loading {loading}", enabled=not args.no_progress, after=0.0,
                    log_every=cli.LOG_EVERY):  # seconds before anything else can start: a line that moves
        if needs_timm:  # loaded here, under the line, rather than silently when the model is built
            import timm  # noqa: F401

        from .job import Feed, extract

    result = extract(args.backbone, args.dataset, splits=args.split.split(",") if args.split else None,
                     out=args.out, head=args.head, data_dir=args.data_dir, weights=args.weights,
                     batch_size=args.batch_size, num_workers=args.num_workers, device=args.device,
                     dtype=args.dtype, shard=args.shard, shard_rows=args.shard_rows, skip_bad=args.skip_bad,
                     decode_mode=args.decode, progress=not args.no_progress, feed=Feed.parse(args.feed),
                     worker_every=args.worker_every)
    for s in result["splits"]:
        rate = s["rows"] / s["seconds"] if s["seconds"] > 0 else 0.0
        state = "complete" if s["complete"] else "waiting for other writers' shards"
        skipped = f", {len(s['skipped'])} skipped" if s["skipped"] else ""
        if s["repeated_items"]:
            skipped += (f"; NOTE: {s['repeated_items']} rows are byte-identical copies of another row's image (the "
                        "same item: one image in several rows)")
        print(f"{result['out']} [{s['split']}]: {s['rows']} images in {s['shards']} shards, "
              f"{s['seconds']:.1f} s ({rate:.0f} img/s){skipped}; {state}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

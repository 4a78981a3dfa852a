"""``hf:PATH_OR_NAME`` datasets (:mod:`featurize.datasets`): a ``save_to_disk`` folder, a folder of parquet/arrow
files or a hub name, read through the ``datasets`` library; only files inside the dataset's folder, and no cache
left outside ``--out``."""
from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from .split import ImageSplit
from .decode import to_rgb
from .names import DatasetError


class HFImages:
    """The image column of a Hugging Face ``datasets.Dataset``, decoded here (as every other source is)."""

    def __init__(self, dataset, column: str, origin: str, cache=None):
        self.dataset, self.column, self.origin = dataset, column, origin
        self._cache = cache  # the temporary folder the dataset's Arrow files are in: removed when this goes

    def __getstate__(self):  # a worker gets the rows, not the folder's owner (which would remove it on exit)
        return {**self.__dict__, "_cache": None}

    def read(self, i: int) -> Image.Image:
        with Image.open(io.BytesIO(self.raw(i))) as im:
            return to_rgb(im)

    def raw(self, i: int) -> bytes:
        """Row ``i``'s encoded image: the bytes the dataset holds, else those of the file it names; for decoders
        that take bytes (JPEG draft mode, the device's decoder)."""
        value = self.dataset[i][self.column]
        if value is None:
            raise ValueError("no image in this row")
        data, path = value.get("bytes"), value.get("path")
        if data is not None:
            return bytes(data)
        with open(path, "rb") as f:
            return f.read()

    def describe(self, i: int) -> str:
        return f"{self.origin} row {i}"


def _hf_spec(dataset: str) -> tuple[str, dict]:
    spec, _, options = dataset[len("hf:"):].partition("#")
    if not spec:
        raise DatasetError("hf needs a dataset: hf:PATH_OR_NAME")
    chosen = {}
    for item in filter(None, options.split(",")):
        name, eq, value = item.partition("=")
        if name not in ("image", "label") or not eq or not value:
            raise DatasetError(f"{dataset}: options after '#' are image=COLUMN and label=COLUMN, got {item!r}")
        chosen[name] = value
    return spec, chosen


def _hf_load(spec: str):
    """``(splits as a DatasetDict, origin, root, cache)``: ``save_to_disk`` folders by ``load_from_disk``, other
    folders and hub names by the ``datasets`` builder; offline, a hub name whose files are in the HF hub cache
    (``hf download --repo-type dataset NAME``) loads from that snapshot, and ``origin`` records its repository and
    commit. ``root`` is the folder the dataset's files must lie in; a builder's ``data_files`` outside it (a README
    naming ``../outside/*.png``) are refused. The builder's Arrow cache is written to ``cache``, a temporary folder
    that lives as long as the returned splits (not ``HF_HOME/datasets``: nothing is left outside ``--out``)."""
    try:
        import datasets
    except ImportError:
        raise DatasetError("hf: datasets need the Hugging Face `datasets` package: pip install 'privlin[hf]'") \
            from None
    path = Path(spec).expanduser()
    origin, cache = None, None
    try:
        if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
            return _as_dict(datasets, datasets.load_from_disk(str(path))), None, path.resolve(), None
        snapshot = None
        if not path.exists():
            snapshot = _hub_snapshot(spec) if datasets.config.HF_HUB_OFFLINE else None
            if snapshot is not None:
                origin = {"repo": spec.partition("@")[0], "revision": Path(snapshot).name}
        source = str(path) if path.exists() else snapshot or spec
        # a snapshot's files are links into the repository's blobs/: its root is the repository's cache folder
        root = path.resolve() if path.exists() else Path(snapshot).parent.parent.resolve() if snapshot else None
        cache = tempfile.TemporaryDirectory(prefix="privlin-hf-datasets-")
        builder = datasets.load_dataset_builder(source, cache_dir=cache.name)
        if root is not None:
            for files in (builder.config.data_files or {}).values():
                for name in files:
                    _inside(spec, root, str(name), "data_files names")
        builder.download_and_prepare()
        loaded = _as_dict(datasets, builder.as_dataset())
    except (FileNotFoundError, ValueError, ConnectionError, OSError) as e:
        if isinstance(e, DatasetError):
            raise
        from huggingface_hub import constants

        where = "" if path.exists() else (
            f" It is no local folder, and as a hub name it is in neither the HF hub cache {constants.HF_HUB_CACHE} "
            f"nor the datasets cache {datasets.config.HF_DATASETS_CACHE}"
            f"{' (HF_HUB_OFFLINE=1 forbids downloading)' if datasets.config.HF_HUB_OFFLINE else ''}: fetch it "
            f"where the hub is reachable (`hf download --repo-type dataset {spec.partition('@')[0]}`, same HF_HOME), "
            "or pass its folder.")
        raise DatasetError(f"hf:{spec}: cannot load it as a Hugging Face dataset ({type(e).__name__}: "
                           f"{' '.join(str(e).split())[:500]}).{where}") from None
    return loaded, origin, root, cache


def _as_dict(datasets, loaded):
    return datasets.DatasetDict({"train": loaded}) if isinstance(loaded, datasets.Dataset) else loaded


def _inside(spec: str, root: Path, name: str, what: str) -> None:
    """Refuse a file ``name`` (after links) outside the dataset's folder ``root``: featurize reads the named data
    only, and records that folder as where it came from."""
    if name.startswith(("hf://", "http://", "https://")):
        raise DatasetError(f"hf:{spec}: {what} {name[:200]!r}, not a file in the dataset's folder {str(root)!r}; "
                           "refused")
    real = Path(os.path.realpath(name.removeprefix("file://")))
    if real != root and root not in real.parents:
        raise DatasetError(f"hf:{spec}: {what} {name[:200]!r}, outside the dataset's folder {str(root)!r}; refused "
                           "(featurize reads only the named data): move it into the folder")


def _paths_inside(spec: str, rows, column: str, root: Path | None) -> None:
    """Every row of ``column`` that names a file instead of holding its bytes names one inside ``root``."""
    import pyarrow.compute as pc

    table = rows.with_format("arrow")[:][column] if len(rows) else None
    if table is None:
        return
    paths = pc.struct_field(table, "path").filter(pc.is_null(pc.struct_field(table, "bytes"))).to_pylist()
    for i, name in enumerate(paths):
        if name is None:
            continue
        if root is None:
            raise DatasetError(f"hf:{spec}: its image column names files ({name[:200]!r}) and it has no folder "
                               "of its own to hold them; refused")
        _inside(spec, root, name, f"column {column!r} names")


def _hub_snapshot(spec: str) -> str | None:
    """The cached snapshot folder of hub dataset ``spec`` (``org/name[@revision]``), or None; never downloads."""
    from huggingface_hub import snapshot_download

    repo, _, revision = spec.partition("@")
    try:
        return snapshot_download(repo, repo_type="dataset", revision=revision or None, local_files_only=True)
    except Exception:  # noqa: BLE001 - not cached, or not a repository name: load_dataset reports it
        return None


def _hf_columns(dataset: str, features, chosen: dict) -> tuple[str, str, list[str] | None]:
    """``(image column, label column, class names or None)`` from the dataset's features (its public schema)."""
    import datasets

    def pick(kind, candidates, preferred):
        if kind in chosen:
            if chosen[kind] not in features:
                raise DatasetError(f"{dataset}: no column {chosen[kind]!r}; columns: {list(features)}")
            return chosen[kind]
        if len(candidates) == 1:
            return candidates[0]
        for name in preferred:
            if name in candidates:
                return name
        what = "several" if candidates else "no"
        raise DatasetError(f"{dataset}: {what} {kind} columns ({candidates or list(features)}); choose one with "
                           f"hf:NAME#{kind}=COLUMN")

    images = [c for c, f in features.items() if isinstance(f, datasets.Image)]
    image = pick("image", images, ("image", "img"))
    if not isinstance(features[image], datasets.Image):
        raise DatasetError(f"{dataset}: column {image!r} is {features[image]}, not an Image column")
    labels = [c for c, f in features.items() if isinstance(f, datasets.ClassLabel)] or \
        [c for c in ("label", "labels") if c in features]
    label = pick("label", labels, ("label", "labels"))
    feature = features[label]
    if isinstance(feature, datasets.ClassLabel):
        return image, label, [str(n) for n in feature.names]
    if not (isinstance(feature, datasets.Value) and feature.dtype.startswith(("int", "uint"))):
        raise DatasetError(f"{dataset}: label column {label!r} is {feature}, not a ClassLabel or integer column")
    return image, label, None


def open_hf(dataset: str, split: str) -> ImageSplit:
    """Rows of one split of ``hf:PATH_OR_NAME`` (:func:`featurize.open_split`)."""
    import datasets

    spec, chosen = _hf_spec(dataset)
    loaded, origin, root, cache = _hf_load(spec)
    if split not in loaded:
        raise DatasetError(f"{dataset} has splits {sorted(loaded)}, not {split!r}")
    columns = {s: _hf_columns(dataset, d.features, chosen) for s, d in loaded.items()}
    image, label, classes = columns[split]
    if any(c[2] != classes for c in columns.values()):
        raise DatasetError(f"{dataset}: the splits' class lists differ ({ {s: c[2] for s, c in columns.items()} }); "
                           "one store needs one")
    ds = loaded[split]
    labels = np.asarray(ds.with_format("numpy")[label], dtype=np.int64)
    if labels.size and labels.min() < 0:
        raise DatasetError(f"{dataset}: split {split!r} row {int(np.argmin(labels))} has label "
                           f"{int(labels.min())} (no label); remove unlabelled rows first")
    if classes is not None and labels.size and labels.max() >= len(classes):
        raise DatasetError(f"{dataset}: split {split!r} has label {int(labels.max())} beyond its "
                           f"{len(classes)} ClassLabel names")
    rows = ds.select_columns([image]).cast_column(image, datasets.Image(decode=False))
    _paths_inside(spec, rows, image, root)
    fingerprint = getattr(ds, "_fingerprint", None)
    return ImageSplit(dataset, split, [f"{split}:{i}" for i in range(len(ds))], labels, classes,
                      HFImages(rows, image, f"{dataset} {split}", cache),
                      attrs={"source": spec, "hub": origin, "layout": "huggingface-datasets", "image_column": image,
                             "label_column": label, "fingerprint": fingerprint,
                             "classes_source": "ClassLabel names" if classes is not None else
                             "none: the label column is not a ClassLabel, so no class list is published"})


def hf_splits(dataset: str) -> list[str]:
    """The split names of ``hf:PATH_OR_NAME``."""
    return list(_hf_load(_hf_spec(dataset)[0])[0])

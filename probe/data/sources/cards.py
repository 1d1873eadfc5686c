"""Dataset cards: the official files, where they come from, their digests and the factor grid.

The cards are the source of truth; ``datasets/<name>.json`` in the repository are written from them
(``python -m probe.data.sources.cards``) and a test checks that they agree.

Digests: a sha256 is given only where a public reference states it (tensorflow_datasets' checksums.tsv for
3dshapes.h5); other files carry ``"sha256": null`` and, where disent (nmichlo/disent) records one, the full-file
MD5 as ``"md5"``. ``probe datasets fetch`` checks whichever is known and always prints the sha256 it computed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

DSPRITES_URL = "https://github.com/deepmind/dsprites-dataset/raw/master/dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz"
MPI3D_BASE = "https://storage.googleapis.com/disentanglement_dataset/Final_Dataset/"
MPI3D_NAMES = ["object_color", "object_shape", "object_size", "camera_height", "background_color",
               "horizontal_axis", "vertical_axis"]


def _mpi3d(variant: str, file: str, url: str | None, md5: str | None, sizes, note: str) -> dict:
    return {
        "name": f"mpi3d_{variant}", "title": f"MPI3D-{variant}", "homepage": "https://github.com/rr-learning/disentanglement_dataset",
        "files": [{"name": file, "url": url, "sha256": None, "md5": md5, "bytes": None}],
        "format": "npz with key `images` uint8 [N, 64, 64, 3] in C order of the factors (no labels)",
        "factor_names": MPI3D_NAMES, "factor_sizes": sizes,
        "factor_values": [list(range(s)) for s in sizes[:5]] + [list(range(40)), list(range(40))],
        "alternative_factor_sizes": [[4, 4, 2, 3, 3, 40, 40]] if sizes[0] == 6 else [],
        "channels": 3, "resolution": 64, "notes": note,
    }


CARDS: dict[str, dict] = {
    "dsprites": {
        "name": "dsprites", "title": "dSprites", "homepage": "https://github.com/deepmind/dsprites-dataset",
        "files": [{"name": "dsprites_ndarray_co1sh3sc6or40x32y32_64x64.npz", "url": DSPRITES_URL, "sha256": None,
                   "md5": None, "bytes": None}],
        "format": "npz: imgs uint8 [737280, 64, 64] with values 0/1, latents_classes int64 [737280, 6], "
                  "latents_values float64 [737280, 6], metadata (pickled dict; not unpickled by probe)",
        "factor_names": ["shape", "scale", "orientation", "posX", "posY"],
        "factor_sizes": [3, 6, 40, 32, 32],
        "factor_values": [[1.0, 2.0, 3.0], np.linspace(0.5, 1.0, 6).tolist(), "40 values in [0, 2π] (from the file)",
                          np.linspace(0, 1, 32).tolist(), np.linspace(0, 1, 32).tolist()],
        "channels": 1, "resolution": 64,
        "notes": "The colour latent (size 1) is dropped. Pixels 0/1 are stored as 0/255. Physical values are read "
                 "from latents_values. The sha256 of the npz is not published; the sibling "
                 "dsprites_ndarray_co1sh3sc6or40x32y32_64x64.hdf5 has sha256 "
                 "729fa22e884c9c500e1f17415d580746b4c5894fbbb780a1319bbcfa39a745bb (tensorflow_datasets).",
    },
    "shapes3d": {
        "name": "shapes3d", "title": "3D Shapes", "homepage": "https://github.com/deepmind/3d-shapes",
        "files": [{"name": "3dshapes.h5", "url": "https://storage.googleapis.com/3d-shapes/3dshapes.h5",
                   "sha256": "0a0f6ed98baff276a50f3a081a7434d788da63cb135a98189b2a5b5769be1785",
                   "md5": "099a2078d58cec4daad0702c55d06868", "bytes": 267573662}],
        "format": "HDF5: images uint8 [480000, 64, 64, 3], labels float64 [480000, 6] (physical values), C order",
        "factor_names": ["floor_hue", "wall_hue", "object_hue", "scale", "shape", "orientation"],
        "factor_sizes": [10, 10, 10, 8, 4, 15],
        "factor_values": [np.linspace(0, 1, 10, endpoint=False).tolist()] * 3
                         + [np.linspace(0.75, 1.25, 8).tolist(), [0.0, 1.0, 2.0, 3.0], np.linspace(-30, 30, 15).tolist()],
        "channels": 3, "resolution": 64,
        "notes": "Class indices are recovered from labels with np.unique per column (as tensorflow_datasets does).",
    },
    "mpi3d_toy": _mpi3d("toy", "mpi3d_toy.npz", MPI3D_BASE + "mpi3d_toy.npz", "55889cb7c7dfc655d6e0277beee88868",
                        [6, 6, 2, 3, 3, 40, 40],
                        "The Final_Dataset release has 1,036,800 images (6 colours, 6 shapes); disentanglement_lib's "
                        "older sim_toy_64x_ordered_without_heldout_factors.npz has 460,800 (4, 4). Both are accepted."),
    "mpi3d_realistic": _mpi3d("realistic", "mpi3d_realistic.npz", MPI3D_BASE + "mpi3d_realistic.npz",
                              "59a6225b88b635365f70c91b3e52f70f", [6, 6, 2, 3, 3, 40, 40], "As mpi3d_toy."),
    "mpi3d_real": _mpi3d("real", "mpi3d_real.npz", MPI3D_BASE + "mpi3d_real.npz", "0f33f609918fb5c97996692f91129802",
                         [6, 6, 2, 3, 3, 40, 40], "As mpi3d_toy."),
    "mpi3d_complex": _mpi3d("complex", "real3d_complicated_shapes_ordered.npz",
                            "https://drive.google.com/uc?export=download&id=1Tp8eTdHxgUMtsZv5uAoYAbJR1BOa_OQm", None,
                            [4, 4, 2, 3, 3, 40, 40],
                            "Hosted on Google Drive (needs a browser confirmation for large files): download by hand."),
    "falcor3d": {
        "name": "falcor3d", "title": "Falcor3D", "homepage": "https://github.com/NVlabs/High-res-disentanglement-datasets",
        "files": [{"name": "Falcor3D_down128.zip", "url": "https://drive.google.com/uc?export=download&id=1XAQfFK1x6cpN1eiovbP0hVfLTm5SsSoJ",
                   "sha256": None, "md5": None, "bytes": None}],
        "format": "zip (or its extracted folder) with Falcor3D_down128/images/NNNNNN.png (128×128 RGB) and "
                  "Falcor3D_down128/train-rec.labels (npy float [233280, 7])",
        "factor_names": ["lighting_intensity", "lighting_x", "lighting_y", "lighting_z", "camera_x", "camera_y", "camera_z"],
        "factor_sizes": [5, 6, 6, 6, 6, 6, 6],
        "factor_values": "from the labels (np.unique per column)",
        "channels": 3, "resolution": 64,
        "notes": "Resized 128 -> 64 with PIL bicubic (antialiased), as FactorQVAE does. Google Drive: download by hand.",
    },
    "isaac3d": {
        "name": "isaac3d", "title": "Isaac3D", "homepage": "https://github.com/NVlabs/High-res-disentanglement-datasets",
        "files": [{"name": "Isaac3D_down128.zip", "url": "https://drive.google.com/uc?export=download&id=1OmQ1G2wnm6eTsSFGTKFZZAh5D3nQTW1B",
                   "sha256": None, "md5": None, "bytes": None}],
        "format": "zip (or its extracted folder) with Isaac3D_down128/images/NNNNNN.png (128×128 RGB) and "
                  "Isaac3D_down128/labels.npy (float [737280, 9])",
        "factor_names": ["object_shape", "robot_x", "robot_y", "camera_height", "object_scale", "lighting_intensity",
                         "lighting_y_dir", "object_color", "wall_color"],
        "factor_sizes": [3, 8, 5, 4, 4, 4, 6, 4, 4],
        "factor_values": "from the labels (np.unique per column)",
        "channels": 3, "resolution": 64,
        "notes": "Resized 128 -> 64 with PIL bicubic (antialiased). Google Drive: download by hand.",
    },
    "cars3d": {
        "name": "cars3d", "title": "Cars3D", "homepage": "https://papers.nips.cc/paper/5845-deep-visual-analogy-making",
        "files": [{"name": "nips2015-analogy-data.tar.gz", "url": "http://www.scottreed.info/files/nips2015-analogy-data.tar.gz",
                   "sha256": None, "md5": "4e866a7919c1beedf53964e6f7a23686", "bytes": None}],
        "format": "tar.gz (or its extracted data/ folder) with data/cars/list.txt and data/cars/car_*_mesh.mat, "
                  "each with `im` uint8 [128, 128, 3, 24 azimuths, 4 elevations]",
        "factor_names": ["elevation", "azimuth", "object_type"],
        "factor_sizes": [4, 24, 183],
        "factor_values": [list(range(4)), list(range(24)), list(range(183))],
        "channels": 3, "resolution": 64,
        "notes": "Object ids follow list.txt (disentanglement_lib uses the unsorted directory listing, which depends on "
                 "the file system). Resized 128 -> 64 with PIL Lanczos (disentanglement_lib's thumbnail ANTIALIAS).",
    },
}


def write_cards(folder: str | Path) -> list[Path]:
    """Write datasets/<name>.json (the machine-readable cards)."""
    folder = Path(folder)
    paths = []
    for name, card in CARDS.items():
        path = folder / f"{name}.json"
        path.write_text(json.dumps(card, indent=2, ensure_ascii=False) + "\n")
        paths.append(path)
    return paths


if __name__ == "__main__":  # pragma: no cover
    for p in write_cards(Path(__file__).resolve().parents[3] / "datasets"):
        print(p)

"""The optimizer's side of a zrt.torch checkpoint: one JSON file beside zrt's shards, naming
the optimizer and the torch-side state zrt's slots do not hold."""
import json
import os

_LAYOUT_FILE = "zrt_torch_optimizer.json"


def write_layout(directory, name, state_keys, scalar_state):
    with open(os.path.join(directory, _LAYOUT_FILE), "w") as f:
        json.dump({"optimizer": name, "state_keys": state_keys, "scalar_state": scalar_state}, f)


def read_layout(directory, name):
    """The layout saved in `directory`, refused unless its optimizer is `name`."""
    path = os.path.join(directory, _LAYOUT_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"zrt.torch: {path} is missing: the checkpoint was not "
                                "saved by zrt.torch with an optimizer")
    with open(path) as f:
        layout = json.load(f)
    if layout["optimizer"] != name:
        raise ValueError(f"zrt.torch: the checkpoint's optimizer is {layout['optimizer']}, "
                         f"this one {name}")
    return layout

"""The binding's ctypes structs against the layout tests/api/test_abi_layout.c pins for zrt.h:
a field zrt.h appends, or a size that changes, without the binding following fails here."""
import ctypes
import pathlib
import re

import zrt._lib as lib

LAYOUT = pathlib.Path(__file__).resolve().parents[1] / "api" / "test_abi_layout.c"

# zrt.h's struct -> the binding's, and whether zrt reads its size from the caller (then the
# whole struct must match, not only the fields the binding declares).
STRUCTS = {
    "zrt_comm_config_t": (lib.CommConfig, True),
    "zrt_oob_t": (lib.Oob, True),
    "zrt_partition_config_t": (lib.PartitionConfig, True),
    "zrt_param_info_t": (lib.ParamInfo, True),
    "zrt_shard_piece_t": (lib.ShardPiece, True),
    "zrt_optimizer_args_t": (lib.OptimizerArgs, False),  # zrt's size; the binding reads a prefix
    "zrt_partition_memory_t": (lib.PartitionMemory, True),
    "zrt_partition_stats_t": (lib.PartitionStats, True),
    "zrt_partition_traffic_t": (lib.PartitionTraffic, True),
    "zrt_optimizer_config_t": (lib.OptimizerConfig, True),
}


def pinned():
    text = LAYOUT.read_text()
    sizes = dict((m[0], int(m[1])) for m in re.findall(r"SIZE\((\w+), (\d+)\)", text))
    fields = {}
    for struct, field, offset in re.findall(r"FIELD\((\w+), (\w+), (\d+)\)", text):
        fields.setdefault(struct, []).append((field, int(offset)))
    return sizes, fields


def test_every_struct_matches_the_pinned_layout():
    sizes, fields = pinned()
    for c_name, (struct, whole) in STRUCTS.items():
        assert c_name in fields, f"{c_name} is not pinned in {LAYOUT}"
        declared = {name for name, _ in struct._fields_}
        pinned_names = [name for name, _ in fields[c_name]]
        for name, offset in fields[c_name]:
            if name not in declared:
                assert not whole, f"{struct.__name__} lacks {c_name}.{name}"
                continue
            assert getattr(struct, name).offset == offset, f"{c_name}.{name}"
        for name in declared:
            assert name in pinned_names, f"{struct.__name__}.{name} is not a field of {c_name}"
        if whole:
            assert ctypes.sizeof(struct) == sizes[c_name], c_name

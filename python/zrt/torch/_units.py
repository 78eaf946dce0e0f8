"""Units and parameters as zrt.torch registers them with zrt: which module each parameter
belongs to, and the numbering zrt gives both (units in the order given, the root first;
parameters unit by unit, in the model's own order inside each unit)."""
import torch


class Param:
    """One model parameter: its zrt index, its name in the model, the torch tensor."""

    __slots__ = ("index", "name", "tensor", "unit", "shape", "trainable", "address", "view")

    def __init__(self, index, name, tensor, unit):
        self.index = index
        self.name = name
        self.tensor = tensor
        self.unit = unit
        self.shape = tuple(tensor.shape)
        self.trainable = tensor.requires_grad
        self.address = None  # zrt's address of its values, as last bound
        self.view = None  # the tensor over that address (what .data is, but in summon)


class Unit:
    """Parameters fetched, reduced and released together: a module's, or the root's."""

    def __init__(self, index, name, module, sharded):
        self.index = index
        self.name = name
        self.module = module
        self.sharded = sharded
        self.params = []
        self.fetched = False
        self.open = False  # its gradient window is handed out
        self.ready = False  # grad_ready called in this backward
        self.arrived = 0  # gradients accumulated in this backward
        self.resident = False  # always gathered (stages 0-2, frozen, persistent)

    @property
    def trainable(self):
        return [p for p in self.params if p.trainable]


def default_units(model):
    """The top-level children that have parameters; a container without a forward of its own
    (ModuleList, ModuleDict), which never runs hooks, contributes its children."""
    modules = []
    for child in model.children():
        if isinstance(child, (torch.nn.ModuleList, torch.nn.ModuleDict)):
            modules.extend(child.children())
        else:
            modules.append(child)
    return [m for m in modules if any(True for _ in m.parameters())]


def build_units(model, units, sharded):
    """(units, params, root): the root unit (parameters of no unit; None if there are none)
    first, then one unit per module of `units` (default_units when None)."""
    modules = default_units(model) if units is None else list(units)
    names = {id(m): n for n, m in model.named_modules()}
    root = Unit(0, "", model, sharded)  # "": zrt's exports keep its names unqualified
    every = [root]
    owner = {}
    for module in modules:
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"zrt.torch.shard: units holds a {type(module).__name__}, not a "
                            "torch.nn.Module")
        if id(module) not in names:
            raise ValueError("zrt.torch.shard: a unit is not a submodule of the model")
        if module is model:
            raise ValueError("zrt.torch.shard: the model itself cannot be a unit (it is the "
                             "root; name its submodules)")
        unit = Unit(len(every), names[id(module)], module, sharded)
        every.append(unit)
        for p in module.parameters():
            if id(p) in owner and owner[id(p)] is not unit:
                raise ValueError(f"zrt.torch.shard: a parameter of unit {unit.name!r} also "
                                 f"belongs to unit {owner[id(p)].name!r}: units must not "
                                 "overlap or share parameters")
            owner[id(p)] = unit
    for name, tensor in model.named_parameters():
        unit = owner.get(id(tensor), root)
        unit.params.append(Param(-1, name, tensor, unit))
    if not root.params:
        every.pop(0)
        root = None
    params = []
    for index, unit in enumerate(every):
        unit.index = index
        for p in unit.params:
            p.index = len(params)
            params.append(p)
    return every, params, root

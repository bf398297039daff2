#ifndef KILN_OPS_TD
#define KILN_OPS_TD

include "kiln/ir/KilnDialect.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Kiln_FloatTensor : RankedTensorOf<[F16, BF16, F32, F64]>;
def Kiln_AnyTensor : RankedTensorOf<[AnyFloat, AnyInteger]>;

// Elementwise binary ops broadcast their operands NumPy-style and promote element types.
class Kiln_BinaryOp<string mnemonic, list<Trait> traits = []>
    : Kiln_Op<mnemonic, !listconcat(traits, [Pure, InferTypeOpAdaptor])> {
  let arguments = (ins Kiln_AnyTensor:$lhs, Kiln_AnyTensor:$rhs);
  let results = (outs Kiln_AnyTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)";
}

def Kiln_AddOp : Kiln_BinaryOp<"add", [Commutative]> {
  let summary = "elementwise lhs + rhs with broadcasting";
  let hasFolder = 0;
}
def Kiln_SubOp : Kiln_BinaryOp<"sub"> { let summary = "elementwise lhs - rhs with broadcasting"; }
def Kiln_MulOp : Kiln_BinaryOp<"mul", [Commutative]> {
  let summary = "elementwise lhs * rhs with broadcasting";
}
def Kiln_DivOp : Kiln_BinaryOp<"div"> { let summary = "elementwise lhs / rhs with broadcasting"; }

class Kiln_UnaryOp<string mnemonic, list<Trait> traits = []>
    : Kiln_Op<mnemonic, !listconcat(traits, [Pure, SameOperandsAndResultType])> {
  let arguments = (ins Kiln_AnyTensor:$input);
  let results = (outs Kiln_AnyTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Kiln_NegOp : Kiln_UnaryOp<"neg"> { let summary = "elementwise -x"; }
def Kiln_ReluOp : Kiln_UnaryOp<"relu"> {
  let summary = "elementwise max(x, 0)";
  let hasFolder = 1;
}

def Kiln_MatmulOp : Kiln_Op<"matmul", [Pure, InferTypeOpAdaptor]> {
  let summary = "matrix product with batch broadcasting (torch.matmul semantics for rank >= 2)";
  let arguments = (ins Kiln_FloatTensor:$lhs, Kiln_FloatTensor:$rhs);
  let results = (outs Kiln_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)";
}

#endif

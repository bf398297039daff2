#ifndef KILN_DIALECT_TD
#define KILN_DIALECT_TD

include "mlir/IR/OpBase.td"

def Kiln_Dialect : Dialect {
  let name = "kiln";
  let summary = "kiln's tensor-level dialect: one op per traced op family";
  let description = [{
    Values are builtin ranked tensors (`tensor<1x3x224x224xf32>`); static parameters (stride,
    padding, axis) are attributes. Every op verifies ranks and element types and infers its
    result type, so passes can build ops without restating types.
  }];
  let cppNamespace = "::kiln::ir";
  let useDefaultAttributePrinterParser = 0;
  let useDefaultTypePrinterParser = 0;
  let hasConstantMaterializer = 0;
}

// An elementwise op code generation emits as loops from its scalar formula (the schema's
// lowering = "loop"): --kiln-fuse-elementwise groups these, codegen writes their loop nests.
def Kiln_ScalarLoop : NativeOpTrait<"ScalarLoop"> {
  let cppNamespace = "::kiln::ir::traits";
}

class Kiln_Op<string mnemonic, list<Trait> traits = []> : Op<Kiln_Dialect, mnemonic, traits>;

#endif

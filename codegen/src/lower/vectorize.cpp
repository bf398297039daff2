// The vector pipeline's middle stages (vectorize.h): tile → peel → vectorize → bufferize, all
// upstream MLIR transformations (scf::tileUsingSCF, scf::peelForLoopAndSimplifyBounds,
// linalg::vectorize, one-shot bufferization), applied to the kernel functions the emitter built
// as linalg on tensors.

#include "vectorize.h"

#include <algorithm>

#include "llvm/ADT/StringSet.h"

#include "f32_math.h"
#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Affine/IR/ValueBoundsOpInterfaceImpl.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/IR/ValueBoundsOpInterfaceImpl.h"
#include "mlir/Dialect/Arith/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Bufferization/Transforms/OneShotAnalysis.h"
#include "mlir/Dialect/Bufferization/Transforms/Transforms.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Linalg/Transforms/Hoisting.h"
#include "mlir/Dialect/Linalg/Transforms/SubsetInsertionOpInterfaceImpl.h"
#include "mlir/Dialect/Linalg/Transforms/TilingInterfaceImpl.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/MemRef/IR/ValueBoundsOpInterfaceImpl.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/IR/ValueBoundsOpInterfaceImpl.h"
#include "mlir/Dialect/SCF/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/SCF/Transforms/TileUsingInterface.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/IR/ValueBoundsOpInterfaceImpl.h"
#include "mlir/Dialect/Tensor/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Tensor/Transforms/SubsetInsertionOpInterfaceImpl.h"
#include "mlir/Dialect/Tensor/Transforms/Transforms.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/Vector/Transforms/BufferizableOpInterfaceImpl.h"
#include "mlir/Dialect/Vector/Transforms/LoweringPatterns.h"
#include "mlir/Dialect/Vector/Transforms/SubsetOpInterfaceImpl.h"
#include "mlir/Dialect/Vector/Transforms/VectorRewritePatterns.h"
#include "mlir/IR/Dominance.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/TilingInterface.h"
#include "mlir/Rewrite/FrozenRewritePatternSet.h"
#include "mlir/Transforms/CSE.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace kiln::codegen::detail {
namespace {

// Vector registers per tile along the innermost dim: while one register's loads wait on memory
// the others compute (LLVM's loop vectorizer interleaves likewise). Four on 512-bit vectors
// (AVX-512, 32 registers), two on narrower ones (AVX2 and SSE have 16; NEON's 32 would allow
// four, not measured), so that the live values of a long chain (GELU's erf) stay in registers.
int64_t registers_per_tile(int64_t vector_bits) {
  return vector_bits >= 512 ? 4 : 2;
}
// The tile's width along its innermost dim, on the tiled generics (the remainder's masks).
const char* const kTileWidthAttr = "kiln.tile_width";

// The rewrite pattern sets of the stages, built once per module.
struct Patterns {
  explicit Patterns(mlir::MLIRContext* ctx) {
    // Canonicalization of the dialects a vector kernel holds (not kiln's or LLVM's).
    mlir::RewritePatternSet canonical_set(ctx);
    const llvm::StringSet<> kernel_dialects = {"affine", "arith", "bufferization", "linalg",
                                               "memref", "scf",   "tensor",        "vector"};
    for (mlir::Dialect* dialect : ctx->getLoadedDialects())
      if (kernel_dialects.contains(dialect->getNamespace()))
        dialect->getCanonicalizationPatterns(canonical_set);
    for (mlir::RegisteredOperationName name : ctx->getRegisteredOperations())
      if (kernel_dialects.contains(name.getDialectNamespace()))
        name.getCanonicalizationPatterns(canonical_set, ctx);
    canonical = mlir::FrozenRewritePatternSet(std::move(canonical_set));
    // f32 transcendental functions as the runtime computes them (f32_math.h), expanded in the
    // scalar body so that they vectorize with it.
    mlir::RewritePatternSet math_set(ctx);
    populate_f32_math_patterns(math_set);
    f32_math = mlir::FrozenRewritePatternSet(std::move(math_set));
    // Tiles of 1 x ... x 1 x W: vectors of W, their reads and writes folded into the buffers'
    // slices.
    mlir::RewritePatternSet vector_set(ctx);
    mlir::vector::populateCastAwayVectorLeadingOneDimPatterns(vector_set);
    mlir::vector::populateVectorTransferDropUnitDimsPatterns(vector_set);
    mlir::tensor::populateFoldTensorSubsetIntoVectorTransferPatterns(vector_set);
    // The remainder's vector.mask regions as masked transfers.
    mlir::vector::populateVectorMaskLoweringPatternsForSideEffectingOps(vector_set);
    // A transposed read as a read of rows and a vector.transpose, lowered to shuffles (on
    // 16 x 16 tiles the AVX-512 sequence of unpacks and lane permutes; else one shuffle of the
    // flattened tile, which LLVM's shuffle lowering splits).
    mlir::vector::populateVectorTransferPermutationMapLoweringPatterns(vector_set);
    mlir::vector::populateVectorTransposeLoweringPatterns(
        vector_set, mlir::vector::VectorTransformsOptions().setVectorTransposeLowering(
                        mlir::vector::VectorTransposeLowering::Shuffle16x16));
    mlir::vector::populateVectorTransposeLoweringPatterns(
        vector_set,
        mlir::vector::VectorTransformsOptions().setVectorTransposeLowering(
            mlir::vector::VectorTransposeLowering::Shuffle1D),
        /*benefit=*/0);
    // A reduction's merge as one horizontal reduction of its tile (vector.reduction).
    mlir::vector::populateVectorMultiReductionLoweringPatterns(
        vector_set, mlir::vector::VectorMultiReductionLowering::InnerReduction);
    vector_cleanup = mlir::FrozenRewritePatternSet(std::move(vector_set));
  }
  mlir::FrozenRewritePatternSet canonical, f32_math, vector_cleanup;
};

// Common subexpressions merged (the tiles' equal slices of one buffer, so that a remainder's
// copy into its own slice folds away), then canonicalization.
void canonicalize(mlir::Operation* op, const Patterns& patterns) {
  mlir::IRRewriter rewriter(op->getContext());
  mlir::DominanceInfo dominance(op);
  mlir::eliminateCommonSubExpressions(rewriter, dominance, op);
  (void)mlir::applyPatternsAndFoldGreedily(op, patterns.canonical);
}

// The widest scalar the generic reads, computes or writes: the lanes of one register.
unsigned widest_element_bits(mlir::linalg::GenericOp g) {
  unsigned bits = 8;
  auto consider = [&](mlir::Type t) {
    t = mlir::getElementTypeOrSelf(t);
    if (t.isIntOrFloat()) bits = std::max(bits, t.getIntOrFloatBitWidth());
  };
  for (mlir::Value v : g->getOperands()) consider(v.getType());
  g.getRegion().walk([&](mlir::Operation* op) {
    for (mlir::Type t : op->getResultTypes()) consider(t);
  });
  return bits;
}

bool has_reduction(mlir::linalg::GenericOp g) {
  return llvm::any_of(g.getIteratorTypesArray(), [](mlir::utils::IteratorType t) {
    return t == mlir::utils::IteratorType::reduction;
  });
}

// Peels the last iteration of a tile loop whose trip count does not divide the extent (known only
// at run time: `dynamic`), so that the other iterations see whole tiles.
void peel_remainder(mlir::RewriterBase& rewriter, mlir::Operation* loop_op, bool dynamic,
                    int64_t extent, int64_t width) {
  if (!dynamic && extent % width == 0) return;
  auto loop = mlir::dyn_cast_or_null<mlir::scf::ForOp>(loop_op);
  mlir::scf::ForOp partial;
  if (loop) (void)mlir::scf::peelForLoopAndSimplifyBounds(rewriter, loop, partial);
}

// A reduction (a row kernel's, over its one dim) into one tile of partial results, a vector
// register's lanes times registers_per_tile wide: each tile combines element-wise into it (a
// parallel generic, vectorized like an elementwise tile), and after the loop one merge reduces the
// tile (scf::tileReductionUsingScf). The remainder peeled.
bool tile_reductions(mlir::func::FuncOp fn, int64_t vector_bits, std::string* error) {
  mlir::IRRewriter rewriter(fn.getContext());
  llvm::SmallVector<mlir::linalg::GenericOp> reductions;
  fn.walk([&](mlir::linalg::GenericOp g) {
    if (has_reduction(g)) reductions.push_back(g);
  });
  for (mlir::linalg::GenericOp g : reductions) {
    const int64_t lanes = std::max<int64_t>(1, vector_bits / widest_element_bits(g));
    const llvm::SmallVector<int64_t> ranges = g.getStaticLoopRanges();
    if (ranges.size() != 1 || ranges[0] == mlir::ShapedType::kDynamic) {
      *error = "a generated reduction is not over one static dim";
      return false;
    }
    const int64_t width = std::min(lanes * registers_per_tile(vector_bits), ranges[0]);
    rewriter.setInsertionPoint(g);
    auto tiled = mlir::scf::tileReductionUsingScf(
        rewriter, mlir::cast<mlir::PartialReductionOpInterface>(g.getOperation()),
        {rewriter.getIndexAttr(width)});
    if (mlir::failed(tiled)) {
      *error = "tiling a generated reduction failed";
      return false;
    }
    for (mlir::Operation* op : tiled->parallelTiledOps)
      op->setAttr(kTileWidthAttr, rewriter.getI64IntegerAttr(width));
    if (!tiled->loops.empty())
      peel_remainder(rewriter, tiled->loops.back().getOperation(), false, ranges[0], width);
  }
  return true;
}

bool tile_and_peel(mlir::func::FuncOp fn, int64_t vector_bits, std::string* error) {
  mlir::IRRewriter rewriter(fn.getContext());
  llvm::SmallVector<mlir::linalg::GenericOp> generics;
  fn.walk([&](mlir::linalg::GenericOp g) {
    if (!g->hasAttr(kTileWidthAttr)) generics.push_back(g);  // not a reduction's tile
  });
  for (mlir::linalg::GenericOp g : generics) {
    const int64_t lanes = std::max<int64_t>(1, vector_bits / widest_element_bits(g));
    const llvm::SmallVector<int64_t> ranges = g.getStaticLoopRanges();
    const int64_t inner = ranges.back();
    const bool dynamic = inner == mlir::ShapedType::kDynamic;
    // A transposing kernel's tiles are a register's lanes square (one register per row of the
    // tile, transposed by shuffles); others one tile of registers along the innermost dim.
    auto transposed = g->getAttrOfType<mlir::IntegerAttr>(kTransposedDimAttr);
    const int64_t tile = transposed ? lanes : lanes * registers_per_tile(vector_bits);
    const int64_t width = dynamic ? tile : std::min(tile, inner);
    llvm::SmallVector<mlir::OpFoldResult> sizes(ranges.size(), rewriter.getIndexAttr(1));
    sizes.back() = rewriter.getIndexAttr(width);
    if (transposed) sizes[transposed.getInt()] = rewriter.getIndexAttr(tile);
    // (A transposing kernel's remainders, static or not, become scalar loops:
    // transposing_remainder.)
    mlir::scf::SCFTilingOptions options;
    options.setTileSizes(sizes);
    rewriter.setInsertionPoint(g);
    auto tiled = mlir::scf::tileUsingSCF(
        rewriter, mlir::cast<mlir::TilingInterface>(g.getOperation()), options);
    if (mlir::failed(tiled)) {
      *error = "tiling a generated kernel failed";
      return false;
    }
    for (mlir::Operation* op : tiled->tiledOps)
      op->setAttr(kTileWidthAttr, rewriter.getI64IntegerAttr(width));
    rewriter.replaceOp(g, tiled->replacements);
    if (!tiled->loops.empty())
      peel_remainder(rewriter, tiled->loops.back().getOperation(), dynamic, inner, width);
    if (transposed) {
      const int64_t t = transposed.getInt();  // one loop per dim
      peel_remainder(rewriter, tiled->loops[t].getOperation(),
                     ranges[t] == mlir::ShapedType::kDynamic, ranges[t], tile);
    }
  }
  return true;
}

// The vector sizes of a tile: none for a whole one (its static shape), 1 x ... x 1 x W for the
// peeled remainder (fewer than W elements along its innermost dim: masked reads and writes).
llvm::SmallVector<int64_t> vector_sizes(mlir::linalg::LinalgOp op) {
  llvm::SmallVector<int64_t> sizes;
  if (!op.hasDynamicShape()) return sizes;
  if (auto width = op->getAttrOfType<mlir::IntegerAttr>(kTileWidthAttr)) {
    sizes.assign(op.getNumLoops(), 1);
    sizes.back() = width.getInt();
  }
  return sizes;
}

// Whether the tile is a transposing kernel's remainder (not a whole square): transposing it
// would be one shuffle of an odd shape that LLVM compiles slowly, for a few elements.
bool transposing_remainder(mlir::linalg::LinalgOp op) {
  auto transposed = op->getAttrOfType<mlir::IntegerAttr>(kTransposedDimAttr);
  auto width = op->getAttrOfType<mlir::IntegerAttr>(kTileWidthAttr);
  if (!transposed || !width) return false;
  const llvm::SmallVector<int64_t> ranges = op.getStaticLoopRanges();
  return ranges[transposed.getInt()] != width.getInt() || ranges.back() != width.getInt();
}

bool vectorize_tile(mlir::RewriterBase& rewriter, mlir::linalg::LinalgOp op) {
  if (transposing_remainder(op)) return false;  // scalar loops
  const llvm::SmallVector<int64_t> sizes = vector_sizes(op);
  if (op.hasDynamicShape() && sizes.empty()) return false;
  // Scalable flags given explicitly: with none, MLIR 19 types a mask differently from the
  // vectors it masks (both print as vector<Nxi1>) and the masked transfers fail to verify.
  const llvm::SmallVector<bool> fixed(sizes.size(), false);
  if (mlir::failed(mlir::linalg::vectorizeOpPrecondition(op, sizes, fixed))) return false;
  rewriter.setInsertionPoint(op);
  return mlir::succeeded(mlir::linalg::vectorize(rewriter, op, sizes, fixed));
}

// Each tile as vector ops: whole tiles directly, the peeled remainder with masks. A tile whose
// body vectorization does not take (a call of libm) is lowered to loops after bufferization.
void vectorize_tiles(mlir::func::FuncOp fn, const Patterns& patterns) {
  mlir::IRRewriter rewriter(fn.getContext());
  llvm::SmallVector<mlir::linalg::LinalgOp> tiles;  // with the reductions' fills and merges
  fn.walk([&](mlir::linalg::LinalgOp op) { tiles.push_back(op); });
  for (mlir::linalg::LinalgOp op : tiles)
    if (op.hasPureTensorSemantics()) (void)vectorize_tile(rewriter, op);
  (void)mlir::applyPatternsAndFoldGreedily(fn, patterns.vector_cleanup);
  canonicalize(fn, patterns);
}

bool bufferize(mlir::func::FuncOp fn, const Patterns& patterns, std::string* error) {
  mlir::IRRewriter rewriter(fn.getContext());
  mlir::bufferization::OneShotBufferizationOptions options;
  options.bufferizeFunctionBoundaries = false;
  options.allowUnknownOps = true;  // the LLVM dialect ops reading the kernel's context
  // The only buffers a kernel allocates are a row kernel's reduction results and partial tiles,
  // a few registers' worth: on the stack, once, at the function's entry (not per row: an alloca
  // in a loop grows the stack each iteration), where LLVM promotes them to registers. Anything
  // larger (a copy the analysis would insert) fails the compile rather than risk the stack.
  options.allocationFn = [](mlir::OpBuilder& b, mlir::Location loc, mlir::MemRefType type,
                            mlir::ValueRange, unsigned alignment) -> mlir::FailureOr<mlir::Value> {
    constexpr int64_t kMaxStackBytes = 4096;
    if (!type.hasStaticShape() || !type.getElementType().isIntOrFloat() ||
        type.getNumElements() * type.getElementTypeBitWidth() / 8 > kMaxStackBytes)
      return mlir::failure();
    mlir::Operation* parent = b.getInsertionBlock()->getParentOp();
    auto fn = mlir::isa<mlir::func::FuncOp>(parent) ? mlir::cast<mlir::func::FuncOp>(parent)
                                                    : parent->getParentOfType<mlir::func::FuncOp>();
    mlir::OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(&fn.getBody().front());
    return b.create<mlir::memref::AllocaOp>(loc, type, b.getI64IntegerAttr(alignment)).getResult();
  };
  if (mlir::failed(mlir::bufferization::runOneShotBufferize(fn, options))) {
    *error = "bufferizing a generated kernel failed";
    return false;
  }
  canonicalize(fn, patterns);
  // Results written where they are materialized bufferize to copies of a buffer onto itself:
  // gone. A tile that only copies (its generic folded into its input) bufferizes to memref.copy,
  // which would lower to a call of MLIR's C runtime: as linalg.copy, vectorized when its shape is
  // static (a copy's dynamic remainder has lost its tile width: a scalar loop). Tiles
  // vectorization did not take: scalar loops over the buffers.
  fn.walk([&](mlir::memref::CopyOp copy) {
    if (copy.getSource() == copy.getTarget()) {
      rewriter.eraseOp(copy);
      return;
    }
    rewriter.setInsertionPoint(copy);
    rewriter.replaceOpWithNewOp<mlir::linalg::CopyOp>(copy, copy.getSource(), copy.getTarget());
  });
  llvm::SmallVector<mlir::linalg::LinalgOp> rest;
  fn.walk([&](mlir::linalg::LinalgOp op) { rest.push_back(op); });
  for (mlir::linalg::LinalgOp op : rest) {
    if (vectorize_tile(rewriter, op)) continue;
    rewriter.setInsertionPoint(op);
    if (mlir::failed(mlir::linalg::linalgOpToLoops(rewriter, op))) {
      *error = "lowering a generated kernel's tile to loops failed";
      return false;
    }
    rewriter.eraseOp(op);
  }
  canonicalize(fn, patterns);
  // A reduction's partial tile read and written by each iteration of its loop: carried in
  // registers instead.
  mlir::linalg::hoistRedundantVectorTransfers(fn);
  canonicalize(fn, patterns);
  return true;
}
}  // namespace

void register_vector_dialects(mlir::DialectRegistry& registry) {
  registry.insert<mlir::linalg::LinalgDialect, mlir::tensor::TensorDialect,
                  mlir::bufferization::BufferizationDialect, mlir::memref::MemRefDialect,
                  mlir::vector::VectorDialect, mlir::affine::AffineDialect>();
  mlir::linalg::registerTilingInterfaceExternalModels(registry);
  mlir::linalg::registerBufferizableOpInterfaceExternalModels(registry);
  mlir::linalg::registerSubsetOpInterfaceExternalModels(registry);
  mlir::tensor::registerBufferizableOpInterfaceExternalModels(registry);
  mlir::tensor::registerSubsetOpInterfaceExternalModels(registry);
  mlir::tensor::registerValueBoundsOpInterfaceExternalModels(registry);
  mlir::scf::registerBufferizableOpInterfaceExternalModels(registry);
  mlir::scf::registerValueBoundsOpInterfaceExternalModels(registry);
  mlir::vector::registerBufferizableOpInterfaceExternalModels(registry);
  mlir::vector::registerSubsetOpInterfaceExternalModels(registry);
  mlir::arith::registerBufferizableOpInterfaceExternalModels(registry);
  mlir::arith::registerValueBoundsOpInterfaceExternalModels(registry);
  mlir::affine::registerValueBoundsOpInterfaceExternalModels(registry);
  mlir::memref::registerValueBoundsOpInterfaceExternalModels(registry);
}

void load_vector_dialects(mlir::MLIRContext* ctx) {
  ctx->loadDialect<mlir::linalg::LinalgDialect, mlir::tensor::TensorDialect,
                   mlir::bufferization::BufferizationDialect, mlir::memref::MemRefDialect,
                   mlir::vector::VectorDialect, mlir::affine::AffineDialect>();
}

bool vectorize_kernels(mlir::ModuleOp module, std::string* error) {
  llvm::SmallVector<mlir::func::FuncOp> kernels;
  for (auto fn : module.getOps<mlir::func::FuncOp>())
    if (fn->hasAttr(kVectorKernelAttr)) kernels.push_back(fn);
  if (kernels.empty()) return true;
  const Patterns patterns(module.getContext());
  for (mlir::func::FuncOp fn : kernels) {
    const int64_t bits = fn->getAttrOfType<mlir::IntegerAttr>(kVectorKernelAttr).getInt();
    // Each result's empty init as its destination's tensor, before anything merges equal empty
    // tensors (two results computed into one buffer would need a copy).
    mlir::IRRewriter rewriter(fn.getContext());
    if (mlir::failed(mlir::bufferization::eliminateEmptyTensors(rewriter, fn))) {
      *error = "eliminating a generated kernel's empty tensors failed";
      return false;
    }
    (void)mlir::applyPatternsAndFoldGreedily(fn, patterns.f32_math);
    if (!tile_reductions(fn, bits, error)) return false;
    if (!tile_and_peel(fn, bits, error)) return false;
    canonicalize(fn, patterns);
    vectorize_tiles(fn, patterns);
    if (!bufferize(fn, patterns, error)) return false;
    fn->removeAttr(kVectorKernelAttr);
  }
  return true;
}

}  // namespace kiln::codegen::detail

#!/usr/bin/env python3
"""Generate an MLIR GEMM benchmark: kernel (linalg.mmt4d on pre-packed operands, or plain
linalg.matmul), a transform script for register tiling + vectorization, and a main that
fills, verifies (full naive reference) and times the kernel.
usage: gen.py M N K mr nr {mmt4d|matmul} [target_seconds] > out.mlir"""
import sys
M, N, K, mr, nr = map(int, sys.argv[1:6]); kind = sys.argv[6]
secs = float(sys.argv[7]) if len(sys.argv) > 7 else 1.0
M1, N1 = -(-M // mr), -(-N // nr)
flops = 2.0 * M * N * K
reps = max(3, int(80e9 * secs / flops))
if kind == "mmt4d":
    tA = f"memref<{M1}x{K}x{mr}x1xf32>"; tB = f"memref<{N1}x{K}x{nr}x1xf32>"; tC = f"memref<{M1}x{N1}x{mr}x{nr}xf32>"
    op = f"linalg.mmt4d ins(%A, %B : {tA}, {tB}) outs(%C : {tC})"
    tiles1, nl1, tiles2, nl2 = "[1, 1, 0, %d, %d, 0]" % (mr, nr), 4, "[0, 0, 1, 0, 0, 1]", 2
else:
    Mp, Np = M1 * mr, N1 * nr
    tA = f"memref<{Mp}x{K}xf32>"; tB = f"memref<{K}x{Np}xf32>"; tC = f"memref<{Mp}x{Np}xf32>"
    op = f"linalg.matmul ins(%A, %B : {tA}, {tB}) outs(%C : {tC})"
    tiles1, nl1, tiles2, nl2 = "[%d, %d, 0]" % (mr, nr), 2, "[0, 0, 1]", 1

def idxA(m, k):  # index expression list for A element (m,k) given SSA names
    return (f"[%m1, {k}, %m0, %c0]" if kind == "mmt4d" else f"[{m}, {k}]")

ao = ", ".join(["!transform.any_op"] * (nl1 + 1))
ao2 = ", ".join(["!transform.any_op"] * (nl2 + 1))
# The operands' values, small integers so that every product and sum is exact:
# fa(m, k) = ((3m + 5k) % 7) - 3 and fb(k, n) = ((2k + 7n) % 5) - 2, 0 in the padding past M or N.
# Fills operand X (A: rows m, B: columns n) with fn's values, packed by index `at`.
def fill_packed(x, d, tiles, tile, fn, at, t):
    return f"""  // pack {x}
  scf.for %{d}1 = %c0 to {tiles} step %c1 {{
    scf.for %{d}0 = %c0 to {tile} step %c1 {{
      %{d}b = arith.muli %{d}1, {tile} : index
      %{d} = arith.addi %{d}b, %{d}0 : index
      scf.for %k = %c0 to %cK step %c1 {{
        %v = func.call {fn} : (index, index) -> f32
        memref.store %v, %{x}{at} : {t}
      }}
    }}
  }}"""

def value_fn(name, ci, cj, mod, off, bound, bounded_first):
    padded = "%i" if bounded_first else "%j"
    return f"""func.func @{name}(%i: index, %j: index) -> f32 {{
  %ci = arith.constant {ci} : index
  %cj = arith.constant {cj} : index
  %cmod = arith.constant {mod} : index
  %cbound = arith.constant {bound} : index
  %z = arith.constant 0.0 : f32
  %a = arith.muli %i, %ci : index
  %b = arith.muli %j, %cj : index
  %s = arith.addi %a, %b : index
  %r = arith.remui %s, %cmod : index
  %n = arith.index_cast %r : index to i32
  %f = arith.sitofp %n : i32 to f32
  %o = arith.constant {off}.0 : f32
  %v = arith.subf %f, %o : f32
  %in = arith.cmpi ult, {padded}, %cbound : index
  %res = arith.select %in, %v, %z : f32
  return %res : f32
}}"""

print(f"""// GEMM C[{M}x{N}] += A[{M}x{K}] * B[{K}x{N}], f32, kind={kind}, register tile {mr}x{nr}
// padded M1={M1} N1={N1}; reps={reps}
func.func private @rtclock() -> f64
func.func private @printF64(f64)
func.func private @printNewline()

func.func @kernel(%A: {tA}, %B: {tB}, %C: {tC}) {{
  {op}
  return
}}

{value_fn("fa", 3, 5, 7, 3, M, bounded_first=True)}
{value_fn("fb", 2, 7, 5, 2, N, bounded_first=False)}

func.func @main() {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %cK = arith.constant {K} : index
  %cM = arith.constant {M} : index
  %cN = arith.constant {N} : index
  %cM1 = arith.constant {M1} : index
  %cN1 = arith.constant {N1} : index
  %cmr = arith.constant {mr} : index
  %cnr = arith.constant {nr} : index
  %zero = arith.constant 0.0 : f32
  %A = memref.alloc() {{alignment = 64}} : {tA}
  %B = memref.alloc() {{alignment = 64}} : {tB}
  %C = memref.alloc() {{alignment = 64}} : {tC}
  linalg.fill ins(%zero : f32) outs(%C : {tC})
{fill_packed("A", "m", "%cM1", "%cmr", "@fa(%m, %k)", idxA("%m", "%k"), tA)}
{fill_packed("B", "n", "%cN1", "%cnr", "@fb(%k, %n)", "[%n1, %k, %n0, %c0]" if kind == "mmt4d" else "[%k, %n]", tB)}
  func.call @kernel(%A, %B, %C) : ({tA}, {tB}, {tC}) -> ()
  // verify every element against a naive scalar reference
  %err = scf.for %m = %c0 to %cM step %c1 iter_args(%e0 = %zero) -> (f32) {{
    %m1 = arith.divui %m, %cmr : index
    %m0 = arith.remui %m, %cmr : index
    %e1 = scf.for %n = %c0 to %cN step %c1 iter_args(%e = %e0) -> (f32) {{
      %ref = scf.for %k = %c0 to %cK step %c1 iter_args(%acc = %zero) -> (f32) {{
        %a = func.call @fa(%m, %k) : (index, index) -> f32
        %b = func.call @fb(%k, %n) : (index, index) -> f32
        %p = arith.mulf %a, %b : f32
        %s = arith.addf %acc, %p : f32
        scf.yield %s : f32
      }}
      %n1 = arith.divui %n, %cnr : index
      %n0 = arith.remui %n, %cnr : index
      %got = memref.load %C{"[%m1, %n1, %m0, %n0]" if kind == "mmt4d" else "[%m, %n]"} : {tC}
      %d = arith.subf %got, %ref : f32
      %ad = math.absf %d : f32
      %mx = arith.maximumf %e, %ad : f32
      scf.yield %mx : f32
    }}
    scf.yield %e1 : f32
  }}
  %errd = arith.extf %err : f32 to f64
  func.call @printF64(%errd) : (f64) -> ()
  func.call @printNewline() : () -> ()
  // sample value C[M-1][N-1]
  %ml = arith.subi %cM, %c1 : index
  %nl = arith.subi %cN, %c1 : index
  %sm1 = arith.divui %ml, %cmr : index
  %sm0 = arith.remui %ml, %cmr : index
  %sn1 = arith.divui %nl, %cnr : index
  %sn0 = arith.remui %nl, %cnr : index
  %sv = memref.load %C{"[%sm1, %sn1, %sm0, %sn0]" if kind == "mmt4d" else "[%ml, %nl]"} : {tC}
  %svd = arith.extf %sv : f32 to f64
  func.call @printF64(%svd) : (f64) -> ()
  func.call @printNewline() : () -> ()
  // timing
  %reps = arith.constant {reps} : index
  %t0 = func.call @rtclock() : () -> f64
  scf.for %i = %c0 to %reps step %c1 {{
    func.call @kernel(%A, %B, %C) : ({tA}, {tB}, {tC}) -> ()
  }}
  %t1 = func.call @rtclock() : () -> f64
  %dt = arith.subf %t1, %t0 : f64
  %fl = arith.constant {flops * reps:.1f} : f64
  %g = arith.divf %fl, %dt : f64
  %e9 = arith.constant 1.0e9 : f64
  %gf = arith.divf %g, %e9 : f64
  func.call @printF64(%gf) : (f64) -> ()
  func.call @printNewline() : () -> ()
  func.call @printF64(%dt) : (f64) -> ()
  func.call @printNewline() : () -> ()
  memref.dealloc %A : {tA}
  memref.dealloc %B : {tB}
  memref.dealloc %C : {tC}
  return
}}

module attributes {{transform.with_named_sequence}} {{
  transform.named_sequence @__transform_main(%module: !transform.any_op {{transform.readonly}}) {{
    %func = transform.structured.match ops{{["func.func"]}} attributes{{sym_name = "kernel"}} in %module
      : (!transform.any_op) -> !transform.op<"func.func">
    %op = transform.structured.match ops{{["{'linalg.mmt4d' if kind == 'mmt4d' else 'linalg.matmul'}"]}} in %func
      : (!transform.op<"func.func">) -> !transform.any_op
    // 1. tile the parallel dims to one register tile (mr x nr)
    %tp, %lp:{nl1} = transform.structured.tile_using_for %op tile_sizes {tiles1}
      : (!transform.any_op) -> ({ao})
    // 2. tile the reduction dim(s) by 1 -> inner K loop
    %tr, %lr:{nl2} = transform.structured.tile_using_for %tp tile_sizes {tiles2}
      : (!transform.any_op) -> ({ao2})
    // 3. vectorize the register-tile op
    transform.structured.vectorize %tr : !transform.any_op
    // 4. multi_reduction -> vector.contract; fold transposes into the transfers
    transform.apply_patterns to %func {{
      transform.apply_patterns.vector.reduction_to_contract
      transform.apply_patterns.vector.transfer_permutation_patterns
    }} : !transform.op<"func.func">
    // 5. simplify the contract to a matmul-like 3-d one
    transform.apply_patterns to %func {{
      transform.apply_patterns.vector.reduction_to_contract
      transform.apply_patterns.vector.cast_away_vector_leading_one_dim
      transform.apply_patterns.canonicalization
    }} : !transform.op<"func.func">
    // 6. fold subviews into the transfers (hoisting refuses view-like sources), then hoist
    //    the C read/write out of the K loop -> accumulator becomes an scf.for iter_arg
    transform.apply_patterns to %func {{
      transform.apply_patterns.memref.fold_memref_alias_ops
      transform.apply_patterns.canonicalization
    }} : !transform.op<"func.func">
    %fh = transform.structured.hoist_redundant_vector_transfers %func
      : (!transform.op<"func.func">) -> !transform.op<"func.func">
    // 7. contract -> outer products -> vector.fma
    transform.apply_patterns to %fh {{
      transform.apply_patterns.vector.lower_contraction lowering_strategy = "outerproduct"
      transform.apply_patterns.vector.lower_outerproduct
      transform.apply_patterns.canonicalization
    }} : !transform.op<"func.func">
    transform.yield
  }}
}}
""")

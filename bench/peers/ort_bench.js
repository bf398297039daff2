// ONNX Runtime (onnxruntime-node) peer for kiln's ResNet-18 / MobileNetV2 latency (issue #8, #9).
// Comparison only: never a dependency of kiln. Install in a scratch folder outside the repo:
//   mkdir -p /tmp/ortnode && cd /tmp/ortnode && npm init -y && \
//     npm install onnxruntime-node --onnxruntime-node-install=skip   # CPU only, no CUDA download
//   NODE_PATH=/tmp/ortnode/node_modules node ort_bench.js MODEL.onnx MODEL_NAME BATCH [ITERS] [WARMUP]
// prints one line: RESULT ort <model> <batch> <median_ms> <min_ms> <n>
// Session: intraOpNumThreads=THREADS (default 2), interOpNumThreads=1, graphOptimizationLevel 'all',
// sequential execution, and intra-op spinning off (ORT_SPIN=1 turns it back on): spin-waiting
// doubles ORT's median on this shared 2-core machine. ORT_PROFILE=PREFIX also writes ORT's
// per-node profile of the timed runs (PREFIX_<date>.json; summarize with ort_profile.py).
const ort = require('onnxruntime-node');

async function main() {
  const [file, name, batchS, itersS, warmupS] = process.argv.slice(2);
  if (!file || !name || !batchS) {
    console.error('usage: ort_bench.js MODEL.onnx MODEL_NAME BATCH [ITERS] [WARMUP]');
    process.exit(2);
  }
  const batch = parseInt(batchS, 10);
  const iters = parseInt(itersS || '20', 10);
  const warmup = parseInt(warmupS || '3', 10);
  const threads = parseInt(process.env.THREADS || '2', 10);
  const session = await ort.InferenceSession.create(file, {
    intraOpNumThreads: threads,
    interOpNumThreads: 1,
    graphOptimizationLevel: 'all',
    executionMode: 'sequential',
    ...((process.env.ORT_SPIN || '0') === '0' ? {extra: {session: {intra_op: {allow_spinning: '0'}}}} : {}),
    ...(process.env.ORT_PROFILE ? {enableProfiling: true, profileFilePrefix: process.env.ORT_PROFILE} : {}),
  });
  const n = batch * 3 * 224 * 224;
  const data = new Float32Array(n);
  for (let i = 0; i < n; ++i) data[i] = Math.random() * 2 - 1;
  const feeds = {[session.inputNames[0]]: new ort.Tensor('float32', data, [batch, 3, 224, 224])};
  for (let i = 0; i < warmup; ++i) await session.run(feeds);
  const times = [];
  let out;
  for (let i = 0; i < iters; ++i) {
    const t0 = process.hrtime.bigint();
    out = await session.run(feeds);
    times.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  if (process.env.ORT_PROFILE) session.endProfiling();
  const dims = out[session.outputNames[0]].dims;
  if (dims[0] !== batch || dims[1] !== 1000) throw new Error(`unexpected output ${dims}`);
  times.sort((a, b) => a - b);
  const m = times.length;
  const median = m % 2 ? times[(m - 1) / 2] : (times[m / 2 - 1] + times[m / 2]) / 2;
  console.log(`RESULT ort ${name} ${batch} ${median.toFixed(3)} ${times[0].toFixed(3)} ${m}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

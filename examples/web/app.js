// An edgebert bundle in the browser through transformers.js (onnxruntime-web, WASM), all from this server:
// the library from node_modules (no CDN), the bundle from /models/<name>/ (serve.py).
// URL parameters: embed=<bundle name>, qa=<bundle name>, rerank=<bundle name> (a cross-encoder; any may be left out), dtype=q8|fp32|q4 (q8: the
// bundle's onnx/model_quantized.onnx, its portable INT8 graph; q4: onnx/model_q4.onnx, the small graph of
// export --int8 --int4), threads=N (WASM threads; more than 1 needs the page to be cross-origin isolated,
// which serve.py does), ortbuild=asyncify|jsep (onnxruntime-web's WASM build; q4 needs jsep, see below),
// autorun=0 to wait for the buttons.
// For tests and benchmarks the page sets window.edgebertResults / window.edgebertDone and exposes
// window.edgebertBench(spec) (timing of the model call on given token ids).
import { AutoModel, AutoModelForSequenceClassification, AutoTokenizer, env, pipeline, Tensor } from "./node_modules/@huggingface/transformers/dist/transformers.min.js";

const params = new URLSearchParams(location.search);
const DTYPE = params.get("dtype") ?? "q8";
const THREADS = Number(params.get("threads") ?? 1);
const ORT = "/node_modules/onnxruntime-web/dist/";

env.allowRemoteModels = false;                 // the bundle is served here; never the Hub
env.allowLocalModels = true;
env.localModelPath = "/models/";
env.useBrowserCache = false;
// onnxruntime-web's WASM build: asyncify (transformers.js' own choice) or jsep. onnxruntime-web
// 1.31.0-dev.20260914's asyncify build has no kernel for com.microsoft.GatherBlockQuantized, the small graph's
// 4-bit word table (dtype q4: "Failed to find kernel"); its jsep build has it (tests/test_web_page.py).
const BUILD = { asyncify: "asyncify", jsep: "jsep" }[params.get("ortbuild") ?? "asyncify"] ?? "asyncify";
env.backends.onnx.wasm.wasmPaths = { mjs: ORT + `ort-wasm-simd-threaded.${BUILD}.mjs`,
                                     wasm: ORT + `ort-wasm-simd-threaded.${BUILD}.wasm` };
env.backends.onnx.wasm.numThreads = THREADS;

const $ = (id) => document.getElementById(id);
const results = { dtype: DTYPE, threads: THREADS, ortBuild: BUILD, isolated: self.crossOriginIsolated, timings: {} };
window.edgebertResults = results;
const now = () => performance.now();
const loaded = {};

async function poolingOf(name) {
  // the bundle's sentence-transformers modules say how its vectors are made (mean / cls, normalized or not)
  const modules = await (await fetch(`/models/${name}/modules.json`)).json();
  const config = await (await fetch(`/models/${name}/1_Pooling/config.json`)).json();
  return { pooling: config.pooling_mode_cls_token ? "cls" : "mean",
           normalize: modules.some((m) => m.type.endsWith("Normalize")) };
}

async function load(task, name) {
  if (!loaded[task]) {
    const t0 = now();
    loaded[task] = await pipeline(task, name, { dtype: DTYPE, device: "wasm" });
    results.timings[`load_${task.replace("-", "_")}_ms`] = now() - t0;
  }
  return loaded[task];
}

function cosine(a, b) {
  let dot = 0, na = 0, nb = 0;
  for (let i = 0; i < a.length; i++) { dot += a[i] * b[i]; na += a[i] * a[i]; nb += b[i] * b[i]; }
  return dot / Math.sqrt(na * nb);
}

async function embed() {
  const name = params.get("embed");
  const texts = $("sentences").value.split("\n").map((s) => s.trim()).filter(Boolean);
  const extractor = await load("feature-extraction", name);
  const options = await poolingOf(name);
  const vectors = [], times = [];
  for (const text of texts) {            // batch 1, as a page embeds what a user types
    const t0 = now();
    const out = await extractor(text, options);
    times.push(now() - t0);
    vectors.push(Array.from(out.data));
  }
  results.embed = { texts, vectors, options, ms: times };
  const rows = texts.map((t, i) => `<tr><td class="text">${t}</td>${texts.map((_, j) =>
    `<td>${cosine(vectors[i], vectors[j]).toFixed(3)}</td>`).join("")}<td>${times[i].toFixed(1)} ms</td></tr>`);
  $("embed-out").innerHTML = `<table><tr><th>sentence</th>${texts.map((_, j) => `<th>${j + 1}</th>`).join("")}
    <th>time</th></tr>${rows.join("")}</table><div class="timing">cosine similarity; model load
    ${results.timings.load_feature_extraction_ms?.toFixed(0) ?? "-"} ms (${options.pooling}${options.normalize ?
    " + normalize" : ""} pooling)</div>`;
}

async function answer() {
  const name = params.get("qa");
  const qa = await load("question-answering", name);
  const question = $("question").value, context = $("context").value;
  const t0 = now();
  const out = await qa(question, context);
  const ms = now() - t0;
  results.qa = { question, context, answer: out.answer, score: out.score, ms };
  $("qa-out").innerHTML = `<div class="answer">${out.answer}</div><div class="timing">score
    ${out.score.toFixed(4)}, ${ms.toFixed(1)} ms; model load ${results.timings.load_question_answering_ms.toFixed(0)} ms</div>`;
}

// A reranker (task rerank: a sentence-transformers CrossEncoder) orders passages for a query. No transformers.js
// pipeline takes text pairs, so the tokenizer (text_pair) and the model run as its own reranking examples do; the
// score is the model's activation of its one logit (config_sentence_transformers.json: Sigmoid, Identity, Tanh),
// what CrossEncoder.predict and EdgeSession.predict give. A pair past the model's length is cut at its tail here.
const ACTIVATIONS = { Sigmoid: (x) => 1 / (1 + Math.exp(-x)), Identity: (x) => x, Tanh: Math.tanh };

async function rerank() {
  const name = params.get("rerank");
  if (!loaded.rerank) {
    const t0 = now();
    const settings = await (await fetch(`/models/${name}/config_sentence_transformers.json`)).json();
    loaded.rerank = { tokenizer: await AutoTokenizer.from_pretrained(name),
                      model: await AutoModelForSequenceClassification.from_pretrained(name, { dtype: DTYPE,
                                                                                               device: "wasm" }),
                      activation: ACTIVATIONS[(settings.activation_fn ?? "Sigmoid").split(".").pop()] };
    results.timings.load_rerank_ms = now() - t0;
  }
  const { tokenizer, model, activation } = loaded.rerank;
  const query = $("query").value;
  const passages = $("passages").value.split("\n").map((s) => s.trim()).filter(Boolean);
  const t0 = now();
  const inputs = tokenizer(passages.map(() => query), { text_pair: passages, padding: true, truncation: true });
  const { logits } = await model(inputs);
  const ms = now() - t0;
  const scores = Array.from(logits.data, activation);
  const order = scores.map((_, i) => i).sort((a, b) => scores[b] - scores[a] || a - b);   // ties in passage order
  results.rerank = { query, passages, scores, order, ms };
  $("rerank-out").innerHTML = `<table><tr><th>rank</th><th>passage</th><th>score</th></tr>${order.map((i, r) =>
    `<tr><td>${r + 1}</td><td class="text">${passages[i]}</td><td>${scores[i].toFixed(4)}</td></tr>`).join("")}
    </table><div class="timing">${passages.length} passages in ${ms.toFixed(1)} ms; model load
    ${results.timings.load_rerank_ms.toFixed(0)} ms</div>`;
}

// Benchmark hook: time the model call (no tokenizing) on given token id rows at batch 1; mean-pooled,
// unit-length vectors of the first round for accuracy. spec: {model, dtype, rows: [[ids]], rounds, warmup}
window.edgebertBench = async (spec) => {
  const t0 = now();
  const model = await AutoModel.from_pretrained(spec.model, { dtype: spec.dtype, device: "wasm" });
  const loadMs = now() - t0;
  const feeds = spec.rows.map((ids) => {
    const n = ids.length;
    return { input_ids: new Tensor("int64", BigInt64Array.from(ids.map(BigInt)), [1, n]),
             attention_mask: new Tensor("int64", new BigInt64Array(n).fill(1n), [1, n]),
             token_type_ids: new Tensor("int64", new BigInt64Array(n), [1, n]) };
  });
  const vectors = [];
  for (const feed of feeds) {
    const hidden = (await model(feed)).last_hidden_state;
    const [, n, h] = hidden.dims, v = new Float64Array(h);
    for (let t = 0; t < n; t++) for (let k = 0; k < h; k++) v[k] += hidden.data[t * h + k] / n;
    const norm = Math.hypot(...v);
    vectors.push(Array.from(v, (x) => x / norm));
  }
  for (let w = 0; w < (spec.warmup ?? 1); w++) for (const feed of feeds) await model(feed);
  const times = feeds.map(() => []);
  for (let r = 0; r < spec.rounds; r++) {
    for (let i = 0; i < feeds.length; i++) {
      const s = now();
      await model(feeds[i]);
      times[i].push(now() - s);
    }
  }
  await model.dispose();
  return { loadMs, times, vectors, isolated: self.crossOriginIsolated, threads: env.backends.onnx.wasm.numThreads };
};

$("embed").onclick = () => embed().catch(fail);
$("answer").onclick = () => answer().catch(fail);
$("rerank").onclick = () => rerank().catch(fail);

function fail(error) {
  results.error = String(error?.stack ?? error);
  $("status").textContent = "error: " + results.error;
  window.edgebertDone = true;
}

$("status").textContent = `transformers.js, onnxruntime-web WASM, dtype ${DTYPE}, ${THREADS} thread(s), ` +
  `cross-origin isolated: ${self.crossOriginIsolated}; bundles: ${params.get("embed") ?? "-"} (embeddings), ` +
  `${params.get("qa") ?? "-"} (answers), ${params.get("rerank") ?? "-"} (reranking)`;
if (params.get("autorun") !== "0") {
  (async () => {
    if (params.get("embed")) await embed();
    if (params.get("qa")) await answer();
    if (params.get("rerank")) await rerank();
    window.edgebertDone = true;
  })().catch(fail);
} else {
  window.edgebertDone = true;
}

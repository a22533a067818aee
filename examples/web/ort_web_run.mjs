// Run ONNX graphs in onnxruntime-web (WASM) under Node, no transformers.js in between, and print the results
// as JSON: what tests/test_web_small_graph.py compares with EdgeSession and benchmarks/web_small_graph.py
// times. Each graph gets its own session; a graph onnxruntime-web cannot load or run is reported with the
// error (not thrown), so that one missing kernel does not hide the other graphs' results.
//
//   node ort_web_run.mjs SPEC.json
//
// SPEC.json: {"threads": 1, "build": "plain" | "asyncify" | "jsep" (onnxruntime-web's WASM build; default plain,
//             what Node picks; transformers.js' browser bundle loads asyncify), "graphs": [{"name": "int4", "path": "/bundle/onnx/model_q4.onnx",
//             "rows": [[101, 2023, 102], ...], "outputs": true, "warmup": 0, "rounds": 0}]}
// Each row runs alone (batch 1, attention mask all ones, token types 0). outputs: the first output
// (last_hidden_state) of every row, as nested lists. rounds > 0: every row's model call timed that many times
// (ms, after warmup untimed rounds), as times[round][row].
import { readFileSync } from "node:fs";
import * as ort from "onnxruntime-web";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
ort.env.wasm.numThreads = spec.threads ?? 1;
ort.env.wasm.simd = true;
ort.env.logLevel = "error";
const build = spec.build ?? "plain";
if (build !== "plain") {
  if (!["asyncify", "jsep"].includes(build)) throw new Error(`unknown build ${build}: plain, asyncify or jsep`);
  const dist = new URL("./node_modules/onnxruntime-web/dist/", import.meta.url).href;
  ort.env.wasm.wasmPaths = { mjs: `${dist}ort-wasm-simd-threaded.${build}.mjs`,
                             wasm: `${dist}ort-wasm-simd-threaded.${build}.wasm` };
}

function feeds(session, row) {
  const n = row.length;
  const all = {
    input_ids: new ort.Tensor("int64", BigInt64Array.from(row.map(BigInt)), [1, n]),
    attention_mask: new ort.Tensor("int64", new BigInt64Array(n).fill(1n), [1, n]),
    token_type_ids: new ort.Tensor("int64", new BigInt64Array(n), [1, n]),
  };
  return Object.fromEntries(session.inputNames.map((k) => [k, all[k]]));
}

function nested(tensor) {
  const [, n, h] = tensor.dims;
  const data = Array.from(tensor.data);
  return Array.from({ length: n }, (_, i) => data.slice(i * h, (i + 1) * h));
}

const out = { versions: { "onnxruntime-web": ort.env.versions?.web, node: process.version },
              threads: ort.env.wasm.numThreads, build, graphs: [] };
for (const g of spec.graphs) {
  const result = { name: g.name, path: g.path };
  let session;
  try {
    const start = performance.now();
    session = await ort.InferenceSession.create(g.path, { executionProviders: ["wasm"],
                                                          graphOptimizationLevel: "all" });
    result.loadMs = performance.now() - start;
  } catch (e) {
    result.error = { stage: "load", message: String(e?.message ?? e) };
    out.graphs.push(result);
    continue;
  }
  try {
    const first = session.outputNames[0];
    if (g.outputs) {
      result.outputs = [];
      for (const row of g.rows) result.outputs.push(nested((await session.run(feeds(session, row), [first]))[first]));
    }
    if (g.rounds) {
      const prepared = g.rows.map((row) => feeds(session, row));
      for (let w = 0; w < (g.warmup ?? 0); w++) for (const f of prepared) await session.run(f, [first]);
      result.times = [];
      for (let r = 0; r < g.rounds; r++) {
        const round = [];
        for (const f of prepared) {
          const start = performance.now();
          await session.run(f, [first]);
          round.push(performance.now() - start);
        }
        result.times.push(round);
      }
    }
  } catch (e) {
    result.error = { stage: "run", message: String(e?.message ?? e) };
  }
  await session.release();
  out.graphs.push(result);
}
process.stdout.write(JSON.stringify(out) + "\n");

// Run transformers.js pipelines on local edgebert bundles in Node (onnxruntime-node, no network) and print
// the results as JSON: what tests/test_transformers_js.py compares with EdgeSession.
//
//   node node_pipeline.mjs JOBS.json
//
// JOBS.json: {"root": "/folder/holding/bundles", "jobs": [{"task": "feature-extraction", "model": "bundle_name",
//             "dtype": "fp32" | "q8", "options": {...pipeline call options}, "inputs": [...]}]}
// A question-answering input is {"question": ..., "context": ...}. Task "cross-encoder" (a rerank bundle: no
// pipeline takes text pairs) runs the tokenizer and the model as transformers.js' own reranking examples do:
// inputs {"query": ..., "passage": ...}, outputs the logits of each pair (the caller applies the activation).
import { readFileSync } from "node:fs";
import { AutoModelForSequenceClassification, AutoTokenizer, env, pipeline } from "@huggingface/transformers";

const spec = JSON.parse(readFileSync(process.argv[2], "utf8"));
env.localModelPath = spec.root.endsWith("/") ? spec.root : spec.root + "/";
env.allowRemoteModels = false;       // a bundle is a local folder: never fetch from the Hub
env.allowLocalModels = true;

const plain = (value) => (value && typeof value.tolist === "function" ? value.tolist() : value);

const results = [];
async function crossEncoder(job) {
  const tokenizer = await AutoTokenizer.from_pretrained(job.model);
  const model = await AutoModelForSequenceClassification.from_pretrained(job.model, { dtype: job.dtype });
  const inputs = tokenizer(job.inputs.map((p) => p.query), {
    text_pair: job.inputs.map((p) => p.passage), padding: true, truncation: true });
  const { logits } = await model(inputs);
  await model.dispose();
  return { task: job.task, model: job.model, dtype: job.dtype, outputs: logits.tolist() };
}

for (const job of spec.jobs) {
  if (job.task === "cross-encoder") {
    results.push(await crossEncoder(job));
    continue;
  }
  const run = await pipeline(job.task, job.model, { dtype: job.dtype, ...(job.load ?? {}) });
  const outputs = [];
  for (const input of job.inputs) {
    const out = job.task === "question-answering"
      ? await run(input.question, input.context, job.options ?? {})
      : await run(input, job.options ?? {});
    outputs.push(plain(out));
  }
  await run.dispose();
  results.push({ task: job.task, model: job.model, dtype: job.dtype, outputs });
}
process.stdout.write(JSON.stringify(results) + "\n");

// Drives Sandgate's model gateway with the real openai SDK for node, unchanged: the
// Responses API, plain and streamed. Exits non-zero naming a failed check; prints the
// checks that passed as JSON.
//
//   node tests/real_clients/openai_node.cjs <node-clients dir> <base URL> <master key>
"use strict";

const path = require("path");

async function main() {
  const [dir, base, key] = process.argv.slice(2);
  const OpenAI = require(path.join(dir, "node_modules", "openai")).default;
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: key, maxRetries: 0 });
  const passed = [];
  const check = (name, condition, detail) => {
    if (!condition) {
      console.error(`check failed: ${name}: ${JSON.stringify(detail)}`);
      process.exit(1);
    }
    passed.push(name);
  };

  const response = await client.responses.create({ model: "gpt", input: "hi" });
  check("node responses.create", response.output_text === "Hello" && response.model === "gpt", response);

  const stream = await client.responses.create({ model: "gpt", input: "hi", stream: true });
  let text = "";
  let usage = null;
  for await (const event of stream) {
    if (event.type === "response.output_text.delta") text += event.delta;
    if (event.type === "response.completed") usage = event.response.usage;
  }
  check("node responses.create(stream)", text === "Hello" && usage && usage.total_tokens === 11, { text, usage });

  const version = require(path.join(dir, "node_modules", "openai", "package.json")).version;
  console.log(JSON.stringify({ passed, version }));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});

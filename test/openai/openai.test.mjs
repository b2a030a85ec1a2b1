// The official openai npm client against `kvscope serve` on stories260K, and
// (structured output and tools) on the random-weight parity model too.
// KVSCOPE_BIN names the kvscope binary (default ../../kvscope) and
// KVSCOPE_TESTDATA the shared data folder (default ../shared beside the
// checkout); where the model is missing, every test is skipped, saying so.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import OpenAI, { APIError } from "openai";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "..", "..");
const bin = process.env.KVSCOPE_BIN || path.join(root, "kvscope");
const shared = process.env.KVSCOPE_TESTDATA || path.join(root, "..", "shared");
const model = path.join(shared, "models", "stories260K.gguf");
const skip = !existsSync(model)
  ? `shared test data ${model} not found (set KVSCOPE_TESTDATA to the shared folder)`
  : !existsSync(bin)
    ? `no kvscope binary at ${bin} (run make build, or set KVSCOPE_BIN)`
    : false;

let server, base, client;
let parity; // a second server, on a random-weight model where the constraint does all the work
const parityModel = path.join(shared, "models", "parity", "parity-Q8_0.gguf");

// startServer runs kvscope serve on stories260K with extra flags and
// returns the process and its base URL.
async function startServer(...flags) {
  return startServerOn(model, ...flags);
}

// startServerOn runs kvscope serve on modelPath with extra flags.
async function startServerOn(modelPath, ...flags) {
  const proc = spawn(bin, ["serve", "-m", modelPath, "--addr", "127.0.0.1:0", "-c", "512", "--max-n", "4", ...flags], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  const url = await new Promise((resolve, reject) => {
    let err = "";
    const timer = setTimeout(() => reject(new Error(`kvscope serve did not start: ${err}`)), 60000);
    proc.stderr.on("data", (d) => {
      err += d;
      const m = /listening on (http:\/\/[0-9.:]+)/.exec(err);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    proc.on("exit", (code) => reject(new Error(`kvscope serve exited ${code}: ${err}`)));
  });
  return { proc, url };
}

// stopServer ends a server started by startServer.
async function stopServer(proc) {
  if (proc && proc.exitCode === null) {
    const exited = new Promise((r) => proc.on("exit", r));
    proc.kill("SIGTERM");
    await exited;
  }
}

before(async () => {
  if (skip) {
    console.log(`skipping the openai client tests: ${skip}`);
    return;
  }
  ({ proc: server, url: base } = await startServer());
  client = new OpenAI({ baseURL: `${base}/v1`, apiKey: "unused-on-loopback", maxRetries: 0 });
  if (existsSync(parityModel)) {
    const p = await startServerOn(parityModel);
    parity = { proc: p.proc, client: new OpenAI({ baseURL: `${p.url}/v1`, apiKey: "unused-on-loopback", maxRetries: 0 }) };
  } else {
    console.log(`skipping the parity-model tests: ${parityModel} not found`);
  }
});

after(async () => {
  await stopServer(server);
  await stopServer(parity?.proc);
});

// usedBlocks reads kvscope:kv_cache_used_blocks from the /metrics of the
// server at url (default the tests' server).
async function usedBlocks(url = base) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = /^kvscope:kv_cache_used_blocks (\S+)$/m.exec(text);
  assert.ok(m, "no kvscope:kv_cache_used_blocks in /metrics");
  return Number(m[1]);
}

const story = "Once upon a time there was a little girl named Lily. She loved to play outside in the park with her dog.";

test("a streamed chat completion with include_usage", { skip }, async () => {
  const stream = await client.chat.completions.create({
    model: "stories260K",
    messages: [{ role: "user", content: "Tell me a story." }],
    max_tokens: 16,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = "";
  let last;
  let finish;
  for await (const chunk of stream) {
    last = chunk;
    for (const c of chunk.choices) {
      text += c.delta?.content ?? "";
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(text.length > 0, "no text streamed");
  assert.ok(finish === "length" || finish === "stop", `finish_reason ${finish}`);
  assert.deepEqual(last.choices, [], "the last chunk has choices");
  assert.ok(last.usage.completion_tokens >= 1 && last.usage.completion_tokens <= 16, JSON.stringify(last.usage));
  assert.equal(last.usage.total_tokens, last.usage.prompt_tokens + last.usage.completion_tokens);
  assert.equal(typeof last.usage.prompt_tokens_details.cached_tokens, "number");
});

test("a non-streamed completion with n = 3", { skip }, async () => {
  const r = await client.completions.create({ model: "stories260K", prompt: "Once upon a time", n: 3, max_tokens: 12, seed: 1 });
  assert.equal(r.object, "text_completion");
  assert.equal(r.choices.length, 3);
  r.choices.forEach((c, i) => {
    assert.equal(c.index, i);
    assert.equal(typeof c.text, "string");
  });
  assert.ok(r.usage.completion_tokens >= 3);
});

test("requests over the limits raise APIError with a 4xx status", { skip }, async () => {
  for (const over of [{ n: 100000 }, { max_tokens: 1e12 }, { prompt: story.repeat(40) }]) {
    await assert.rejects(
      client.completions.create({ model: "stories260K", prompt: "Hi", max_tokens: 4, ...over }),
      (err) => {
        assert.ok(err instanceof APIError, `${err} is not an APIError`);
        assert.equal(err.status, 400);
        assert.ok(err.error?.message || err.message, "no message");
        return true;
      },
    );
  }
  // Still serving.
  const r = await client.completions.create({ model: "stories260K", prompt: "Hi", max_tokens: 2 });
  assert.equal(r.choices.length, 1);
});

// The engine generates far faster than a client reads, so on a server at
// full speed the whole reply can be done (its blocks handed to the prefix
// cache) before the client has read ten chunks. This server waits 50 ms
// after each step (--step-delay, the Teaching tab's slow motion): 400
// tokens take 20 s, so the request is still running when the client stops
// reading after ten.
test("a cancelled stream gives its blocks back", { skip }, async () => {
  const slow = await startServer("--step-delay", "50ms");
  try {
    const c = new OpenAI({ baseURL: `${slow.url}/v1`, apiKey: "unused-on-loopback", maxRetries: 0 });
    const before = await usedBlocks(slow.url);
    const stream = await c.completions.create({ model: "stories260K", prompt: story, max_tokens: 400, stream: true });
    let n = 0;
    let during = before;
    for await (const chunk of stream) {
      if (++n === 10) {
        during = await usedBlocks(slow.url);
        stream.controller.abort();
        break;
      }
    }
    assert.ok(during > before, `used blocks ${during} while streaming, ${before} before`);
    let now = await usedBlocks(slow.url);
    for (let i = 0; i < 200 && now !== before; i++) {
      await new Promise((r) => setTimeout(r, 50));
      now = await usedBlocks(slow.url);
    }
    assert.equal(now, before, "the used-block count did not return to its level before the request");
  } finally {
    await stopServer(slow.proc);
  }
});

test("a second identical request is served from the prefix cache", { skip }, async () => {
  const req = { model: "stories260K", messages: [{ role: "user", content: story + " What happened next?" }], max_tokens: 4, temperature: 0 };
  const a = await client.chat.completions.create(req);
  const b = await client.chat.completions.create(req);
  assert.ok(b.usage.prompt_tokens_details.cached_tokens > 0, `cached_tokens ${b.usage.prompt_tokens_details.cached_tokens}`);
  assert.ok(b.usage.prompt_tokens_details.cached_tokens <= b.usage.prompt_tokens);
  assert.equal(b.choices[0].message.content, a.choices[0].message.content, "greedy replies differ");
});

// validate checks value against the JSON Schema subset these tests use
// (type, properties, required, additionalProperties false, enum,
// maxLength, items, minItems, maxItems) and throws where it does not hold.
function validate(schema, value, at = "$") {
  if (schema.enum) {
    assert.ok(schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value)), `${at}: ${JSON.stringify(value)} not in the enum`);
    return;
  }
  const type = Array.isArray(value) ? "array" : value === null ? "null" : Number.isInteger(value) && schema.type === "integer" ? "integer" : typeof value;
  assert.equal(type, schema.type, `${at}: ${JSON.stringify(value)} is not of type ${schema.type}`);
  if (type === "string" && schema.maxLength !== undefined) assert.ok([...value].length <= schema.maxLength, `${at}: longer than ${schema.maxLength}`);
  if (type === "array") {
    if (schema.minItems !== undefined) assert.ok(value.length >= schema.minItems, `${at}: fewer than ${schema.minItems} items`);
    if (schema.maxItems !== undefined) assert.ok(value.length <= schema.maxItems, `${at}: more than ${schema.maxItems} items`);
    value.forEach((v, i) => validate(schema.items, v, `${at}[${i}]`));
  }
  if (type === "object") {
    for (const k of schema.required ?? []) assert.ok(k in value, `${at}: no ${k}`);
    for (const [k, v] of Object.entries(value)) {
      assert.ok(schema.properties && k in schema.properties, `${at}: unexpected key ${k}`);
      validate(schema.properties[k], v, `${at}.${k}`);
    }
  }
}

const person = {
  type: "object",
  properties: {
    name: { type: "string", maxLength: 12 },
    age: { type: "integer" },
    pets: { type: "array", items: { enum: ["cat", "dog", "fish"] }, minItems: 1, maxItems: 3 },
  },
  required: ["name", "age", "pets"],
  additionalProperties: false,
};

const weather = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather in a city over the next days",
    parameters: {
      type: "object",
      properties: { city: { enum: ["Paris", "Rome", "Oslo"] }, days: { type: "integer" } },
      required: ["city", "days"],
      additionalProperties: false,
    },
  },
};

// The same structured-output tests on both servers: stories260K, and the
// random-weight parity model (neither has a chat template with tools).
for (const which of ["stories260K", "parity"]) {
  const get = () => (which === "parity" ? parity?.client : client);
  const skipThis = skip || (which === "parity" && !existsSync(parityModel) && `${parityModel} not found`);

  test(`${which}: a json_schema reply parses and validates`, { skip: skipThis }, async () => {
    const r = await get().chat.completions.create({
      model: which,
      messages: [{ role: "user", content: "Describe a person as JSON." }],
      response_format: { type: "json_schema", json_schema: { name: "person", strict: true, schema: person } },
      max_tokens: 200,
      temperature: 0,
      seed: 1,
    });
    assert.equal(r.choices[0].finish_reason, "stop");
    validate(person, JSON.parse(r.choices[0].message.content));
  });

  test(`${which}: a json_object reply parses`, { skip: skipThis }, async () => {
    const r = await get().chat.completions.create({
      model: which,
      messages: [{ role: "user", content: "JSON please." }],
      response_format: { type: "json_object" },
      max_tokens: 60,
      temperature: 0,
    });
    const c = r.choices[0];
    if (c.finish_reason === "stop") {
      const v = JSON.parse(c.message.content);
      assert.equal(typeof v, "object");
      assert.ok(v !== null && !Array.isArray(v));
    } else {
      // Random weights may write past max_tokens: the reply is cut, and says so.
      assert.equal(c.finish_reason, "length");
      assert.ok(c.message.content.startsWith("{"), c.message.content);
    }
  });

  for (const stream of [false, true]) {
    test(`${which}: tools answered with a tool_calls entry whose arguments validate${stream ? ", streamed" : ""}`, { skip: skipThis }, async () => {
      const req = {
        model: which,
        messages: [{ role: "user", content: "What is the weather in Rome?" }],
        tools: [weather],
        tool_choice: "required",
        parallel_tool_calls: false,
        max_tokens: 200,
        temperature: 0,
      };
      let calls, finish, format;
      if (stream) {
        const { data, response } = await get().chat.completions.create({ ...req, stream: true }).withResponse();
        format = response.headers.get("x-kvscope-tool-format");
        calls = [];
        for await (const chunk of data) {
          for (const c of chunk.choices) {
            for (const tc of c.delta?.tool_calls ?? []) {
              calls[tc.index] ??= { function: { name: "", arguments: "" } };
              if (tc.id) calls[tc.index].id = tc.id;
              calls[tc.index].function.name += tc.function?.name ?? "";
              calls[tc.index].function.arguments += tc.function?.arguments ?? "";
            }
            if (c.finish_reason) finish = c.finish_reason;
          }
        }
      } else {
        const { data, response } = await get().chat.completions.create(req).withResponse();
        format = response.headers.get("x-kvscope-tool-format");
        assert.equal(data.tool_format, "generic");
        calls = data.choices[0].message.tool_calls;
        finish = data.choices[0].finish_reason;
      }
      // No tool support in the template: llama.cpp's generic format, said so.
      assert.equal(format, "generic");
      assert.equal(finish, "tool_calls");
      assert.equal(calls.length, 1);
      assert.equal(calls[0].function.name, "get_weather");
      assert.ok(calls[0].id, "no call id");
      validate(weather.function.parameters, JSON.parse(calls[0].function.arguments));
    });
  }
}

// Parallel tool calls (OpenAI's default): several calls, each with its own
// id, and the same request streamed, assembled by the client's own stream
// helper, gives the same calls. A server with a longer context, for the
// calls a random-minded model makes.
test("parallel tool calls, streamed and assembled by the client as they are answered whole", { skip }, async () => {
  const { proc, url } = await startServer("-c", "2048");
  try {
    const c = new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused-on-loopback", maxRetries: 0 });
    const clock = {
      type: "function",
      function: {
        name: "get_time",
        description: "The time in a time zone",
        parameters: { type: "object", properties: { zone: { enum: ["UTC", "CET"] } }, required: ["zone"], additionalProperties: false },
      },
    };
    const req = {
      model: "stories260K",
      messages: [{ role: "user", content: "The time in UTC and the weather in Rome?" }],
      tools: [clock, weather],
      tool_choice: "required",
      max_tokens: 1000,
      temperature: 0,
    };
    const schemas = { get_time: clock.function.parameters, get_weather: weather.function.parameters };
    const check = (calls) => {
      assert.ok(calls.length >= 2, `${calls.length} calls`);
      assert.equal(new Set(calls.map((x) => x.id)).size, calls.length, "call ids repeat");
      for (const call of calls) {
        assert.equal(call.type, "function");
        validate(schemas[call.function.name], JSON.parse(call.function.arguments));
      }
    };
    const whole = await c.chat.completions.create(req);
    assert.equal(whole.choices[0].finish_reason, "tool_calls");
    check(whole.choices[0].message.tool_calls);

    const stream = c.chat.completions.stream(req);
    let fragments = 0;
    stream.on("tool_calls.function.arguments.delta", () => fragments++);
    const final = await stream.finalChatCompletion();
    assert.equal(final.choices[0].finish_reason, "tool_calls");
    const calls = final.choices[0].message.tool_calls;
    check(calls);
    assert.deepEqual(
      calls.map((x) => [x.function.name, JSON.parse(x.function.arguments)]),
      whole.choices[0].message.tool_calls.map((x) => [x.function.name, JSON.parse(x.function.arguments)]),
    );
    assert.ok(fragments > calls.length, `${fragments} argument fragments for ${calls.length} calls: not streamed as generated`);
  } finally {
    await stopServer(proc);
  }
});

test("an unsupported field gets a 400 naming it", { skip }, async () => {
  await assert.rejects(
    client.chat.completions.create({ model: "stories260K", messages: [{ role: "user", content: "Hi" }], logprobs: true, max_tokens: 2 }),
    (err) => {
      assert.ok(err instanceof APIError, `${err} is not an APIError`);
      assert.equal(err.status, 400);
      assert.equal(err.param, "logprobs");
      assert.match(err.message, /logprobs/);
      return true;
    },
  );
});

// The official openai npm client against `kvscope serve` on stories260K.
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

// startServer runs kvscope serve on stories260K with extra flags and
// returns the process and its base URL.
async function startServer(...flags) {
  const proc = spawn(bin, ["serve", "-m", model, "--addr", "127.0.0.1:0", "-c", "512", "--max-n", "4", ...flags], {
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
});

after(async () => {
  await stopServer(server);
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

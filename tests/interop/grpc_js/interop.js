#!/usr/bin/env node
// Interop cases that drive a ptserve gRPC port with @grpc/grpc-js, an HTTP/2 and gRPC stack
// independent of grpcio and of ptserve's own transport.
//
//   node interop.js --address HOST:PORT --descriptors FILE [--tls-address HOST:PORT
//       --root-cert CA.pem] [--cases A,B,...] [--list]
//
// FILE is a serialized google.protobuf.FileDescriptorSet holding inference.GRPCInferenceService
// and grpc.health.v1.Health (python -m tests.interop.descriptors FILE writes one). The server
// must serve the example model repository (python -m ptserve.examples) and the models the
// pytest module tests/interop/test_grpc_js.py adds: interop_bytes (UINT8 identity, dims [-1],
// no batching) and interop_sleepy (FP32 [4], sleeps INPUT0[0, 0] seconds, then doubles).
//
// Prints one JSON line per case on stdout: {"name", "ok", "details"}; a failed case's details
// carry "error" and whatever was observed before the failure. Exits 0 once every case has
// reported, whatever their outcome (2 on bad arguments).
'use strict';

// The keepalive cases read grpc-js's own traces (pings sent and answered, GOAWAY, excess
// pings); they are collected in memory, not printed.
process.env.GRPC_NODE_TRACE = process.env.GRPC_NODE_TRACE || 'keepalive,transport';
process.env.GRPC_NODE_VERBOSITY = process.env.GRPC_NODE_VERBOSITY || 'DEBUG';

const fs = require('node:fs');
const http2 = require('node:http2');
const tls = require('node:tls');
const zlib = require('node:zlib');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const UNKNOWN_MODEL = 'no_such_model';
const IDENTITY = 'interop_bytes';
const SLEEPY = 'interop_sleepy';
const MiB = 1024 * 1024;

// --- grpc-js log capture ----------------------------------------------------------------------

const logLines = [];
const keepLine = (...args) => {
  const line = args.map(String).join(' ');
  if (/ping|GOAWAY|keepalive|session closed|connection closed/i.test(line)) {
    logLines.push(line);
  }
};
grpc.setLogger({ error: keepLine, info: keepLine, debug: keepLine });

// --- arguments --------------------------------------------------------------------------------

function parseArgs(argv) {
  const args = { cases: null, list: false };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${arg} needs a value`);
      return argv[++i];
    };
    if (arg === '--address') args.address = value();
    else if (arg === '--descriptors') args.descriptors = value();
    else if (arg === '--tls-address') args.tlsAddress = value();
    else if (arg === '--root-cert') args.rootCert = value();
    else if (arg === '--cases') args.cases = value().split(',').filter(Boolean);
    else if (arg === '--list') args.list = true;
    else throw new Error(`unknown argument ${arg}`);
  }
  if (!args.list && (!args.address || !args.descriptors)) {
    throw new Error('--address and --descriptors are required');
  }
  return args;
}

// --- helpers ----------------------------------------------------------------------------------

class CaseFailure extends Error {}

function check(condition, message) {
  if (!condition) throw new CaseFailure(message);
}

function checkEqual(actual, expected, what) {
  const a = JSON.stringify(actual);
  const e = JSON.stringify(expected);
  check(a === e, `${what}: expected ${e}, got ${a}`);
}

const STATUS_NAMES = Object.fromEntries(Object.entries(grpc.status).map(([k, v]) => [v, k]));
const statusName = (code) => STATUS_NAMES[code] || String(code);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const deadlineIn = (ms) => new Date(Date.now() + ms);

// One unary call: resolves (never rejects) with what came back, the headers and trailers.
function unary(client, method, request, { metadata, timeoutMs = 30000 } = {}) {
  return new Promise((resolve) => {
    const started = Date.now();
    const outcome = { headers: null, trailers: null };
    const call = client[method](
      request,
      metadata || new grpc.Metadata(),
      { deadline: deadlineIn(timeoutMs) },
      (err, response) => {
        outcome.ms = Date.now() - started;
        if (err) {
          outcome.error = { code: statusName(err.code), details: err.details };
        } else {
          outcome.response = response;
        }
        // The status (trailers) event may follow the callback; give it a turn.
        setImmediate(() => resolve(outcome));
      },
    );
    call.on('metadata', (md) => {
      outcome.headers = md.getMap();
    });
    call.on('status', (status) => {
      outcome.trailers = status.metadata ? status.metadata.getMap() : null;
    });
  });
}

function expectOk(outcome, what) {
  check(!outcome.error, `${what}: failed with ${JSON.stringify(outcome.error)}`);
  return outcome.response;
}

function expectError(outcome, code, what) {
  check(outcome.error, `${what}: succeeded, expected ${code}`);
  const got = JSON.stringify(outcome.error);
  check(outcome.error.code === code, `${what}: expected ${code}, got ${got}`);
  return outcome.error;
}

function int32Bytes(values) {
  const buffer = Buffer.alloc(values.length * 4);
  values.forEach((v, k) => buffer.writeInt32LE(v, 4 * k));
  return buffer;
}

function readInt32(buffer) {
  const values = [];
  for (let k = 0; k + 4 <= buffer.length; k += 4) values.push(buffer.readInt32LE(k));
  return values;
}

function float32Bytes(values) {
  const buffer = Buffer.alloc(values.length * 4);
  values.forEach((v, k) => buffer.writeFloatLE(v, 4 * k));
  return buffer;
}

function readFloat32(buffer) {
  const values = [];
  for (let k = 0; k + 4 <= buffer.length; k += 4) values.push(buffer.readFloatLE(k));
  return values;
}

// The BYTES tensor encoding: each element is a 4-byte little-endian length, then the bytes.
function bytesTensor(strings) {
  return Buffer.concat(
    strings.flatMap((s) => {
      const data = Buffer.from(s, 'utf8');
      const length = Buffer.alloc(4);
      length.writeUInt32LE(data.length);
      return [length, data];
    }),
  );
}

function readBytesTensor(buffer) {
  const strings = [];
  let position = 0;
  while (position + 4 <= buffer.length) {
    const length = buffer.readUInt32LE(position);
    strings.push(buffer.subarray(position + 4, position + 4 + length).toString('utf8'));
    position += 4 + length;
  }
  return strings;
}

// simple: INPUT0 = seed + k, INPUT1 = 3k - seed (k = 0..15).
function simpleInputs(seed) {
  const a = Array.from({ length: 16 }, (_, k) => seed + k);
  const b = Array.from({ length: 16 }, (_, k) => 3 * k - seed);
  return { a, b };
}

function simpleRequest(seed, id = '') {
  const { a, b } = simpleInputs(seed);
  return {
    model_name: 'simple',
    id,
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [1, 16] },
      { name: 'INPUT1', datatype: 'INT32', shape: [1, 16] },
    ],
    raw_input_contents: [int32Bytes(a), int32Bytes(b)],
  };
}

// The named output of a response: its metadata and its values (raw or typed contents).
function output(response, name, read) {
  const index = response.outputs.findIndex((o) => o.name === name);
  check(index >= 0, `no output ${name} in ${JSON.stringify(response.outputs.map((o) => o.name))}`);
  const tensor = response.outputs[index];
  const raw = response.raw_output_contents || [];
  const values = raw.length > 0 ? read(raw[index]) : null;
  return { tensor, values, raw: raw.length > 0 };
}

// Checks both outputs of simple element by element; returns a short summary.
function checkSimple(response, seed, what = 'simple') {
  const { a, b } = simpleInputs(seed);
  const sum = output(response, 'OUTPUT0', readInt32);
  const difference = output(response, 'OUTPUT1', readInt32);
  for (const [out, expected, label] of [
    [sum, a.map((v, k) => v + b[k]), 'OUTPUT0'],
    [difference, a.map((v, k) => v - b[k]), 'OUTPUT1'],
  ]) {
    const values = out.raw ? out.values : out.tensor.contents.int_contents;
    checkEqual(out.tensor.datatype, 'INT32', `${what} ${label} datatype`);
    checkEqual(out.tensor.shape.map(Number), [1, 16], `${what} ${label} shape`);
    checkEqual(values, expected, `${what} ${label} values`);
  }
  return {
    OUTPUT0: sum.values,
    OUTPUT1: difference.values,
    raw_outputs: sum.raw,
  };
}

function makeClient(ctx, options = {}, address = ctx.address, credentials = null) {
  const client = new ctx.Service(
    address,
    credentials || grpc.credentials.createInsecure(),
    options,
  );
  ctx.clients.push(client);
  return client;
}

function waitReady(client, ms = 10000) {
  return new Promise((resolve, reject) => {
    client.waitForReady(deadlineIn(ms), (err) => (err ? reject(err) : resolve()));
  });
}

// Watches a channel's connectivity state; stop() returns every state it went through.
function watchStates(client) {
  const channel = client.getChannel();
  const states = [grpc.connectivityState[channel.getConnectivityState(false)]];
  let watching = true;
  const watch = () => {
    const current = channel.getConnectivityState(false);
    channel.watchConnectivityState(current, deadlineIn(60000), () => {
      if (!watching) return;
      states.push(grpc.connectivityState[channel.getConnectivityState(false)]);
      watch();
    });
  };
  watch();
  return () => {
    watching = false;
    return states;
  };
}

// Opens a ModelStreamInfer call and gathers its replies; `done` resolves at its end.
function openStream(client, { metadata, timeoutMs = 60000 } = {}) {
  const call = client.ModelStreamInfer(metadata || new grpc.Metadata(), {
    deadline: deadlineIn(timeoutMs),
  });
  const stream = { call, replies: [], waiters: [] };
  const wake = () => {
    stream.waiters = stream.waiters.filter((w) => {
      if (stream.replies.length >= w.count || stream.ended) {
        w.resolve();
        return false;
      }
      return true;
    });
  };
  call.on('data', (reply) => {
    stream.replies.push(reply);
    wake();
  });
  stream.done = new Promise((resolve) => {
    let error = null;
    call.on('error', (err) => {
      error = { code: statusName(err.code), details: err.details };
    });
    call.on('status', (status) => {
      stream.ended = true;
      wake();
      // 'error' comes before 'status' when the call fails.
      const code = statusName(status.code);
      setImmediate(() => resolve({ code, details: status.details, error }));
    });
  });
  stream.waitFor = (count, ms = 30000) =>
    new Promise((resolve, reject) => {
      if (stream.replies.length >= count || stream.ended) return resolve();
      const timer = setTimeout(
        () => {
          const got = stream.replies.length;
          reject(new CaseFailure(`stream: ${got}/${count} replies after ${ms} ms`));
        },
        ms,
      );
      stream.waiters.push({ count, resolve: () => { clearTimeout(timer); resolve(); } });
    });
  return stream;
}

function sleepyRequest(seconds, value, id = '') {
  return {
    model_name: SLEEPY,
    id,
    inputs: [
      {
        name: 'INPUT0',
        datatype: 'FP32',
        shape: [1, 4],
        contents: { fp32_contents: [seconds, value, value + 1, value + 2] },
      },
    ],
  };
}

function checkSleepy(response, seconds, value) {
  const out = output(response, 'OUTPUT0', readFloat32);
  const values = out.raw ? out.values : out.tensor.contents.fp32_contents;
  checkEqual(values, [seconds, value, value + 1, value + 2].map((v) => 2 * v), 'sleepy OUTPUT0');
  return values;
}

function identityRequest(data, id = '') {
  return {
    model_name: IDENTITY,
    id,
    inputs: [{ name: 'INPUT0', datatype: 'UINT8', shape: [data.length] }],
    raw_input_contents: [data],
  };
}

// A recognisable byte pattern that does not repeat with any short period.
function pattern(length, seed) {
  const data = Buffer.allocUnsafe(length);
  let x = (seed * 2654435761) >>> 0 || 1;
  for (let i = 0; i < length; i += 4) {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    data.writeUInt32LE(x, i);
  }
  return data;
}

async function largeRoundTrip(ctx, mebibytes) {
  const client = makeClient(ctx, {
    'grpc.max_receive_message_length': -1,
    'grpc.max_send_message_length': -1,
  });
  const data = pattern(mebibytes * MiB, mebibytes);
  const outcome = await unary(client, 'ModelInfer', identityRequest(data, `large-${mebibytes}`), {
    timeoutMs: 120000,
  });
  const response = expectOk(outcome, `${mebibytes} MiB identity`);
  const out = output(response, 'OUTPUT0', (b) => b);
  check(out.raw, 'the answer carries no raw_output_contents');
  checkEqual(out.tensor.shape.map(Number), [data.length], 'OUTPUT0 shape');
  const got = out.values.length;
  check(got === data.length, `answer has ${got} bytes, sent ${data.length}`);
  check(out.values.equals(data), 'the answer differs from the request bytes');
  return { bytes: data.length, id: response.id, ms: outcome.ms };
}

// A gRPC call with node:http2 alone, to see what grpc-js hides: the compression headers and the
// compressed flag of each message.
function rawGrpcCall(address, path, message, { compress = false } = {}) {
  return new Promise((resolve, reject) => {
    const session = http2.connect(`http://${address}`);
    session.on('error', reject);
    const payload = compress ? zlib.gzipSync(message) : message;
    const frame = Buffer.alloc(5 + payload.length);
    frame.writeUInt8(compress ? 1 : 0, 0);
    frame.writeUInt32BE(payload.length, 1);
    payload.copy(frame, 5);
    const headers = {
      ':method': 'POST',
      ':path': path,
      'content-type': 'application/grpc',
      te: 'trailers',
      'grpc-accept-encoding': 'gzip',
    };
    if (compress) headers['grpc-encoding'] = 'gzip';
    const stream = session.request(headers);
    const result = { headers: null, trailers: null, messages: [] };
    const chunks = [];
    stream.on('response', (h) => {
      result.headers = h;
    });
    stream.on('trailers', (t) => {
      result.trailers = t;
    });
    stream.on('data', (chunk) => chunks.push(chunk));
    stream.on('error', reject);
    stream.on('end', () => {
      const body = Buffer.concat(chunks);
      let position = 0;
      while (position + 5 <= body.length) {
        const flag = body.readUInt8(position);
        const length = body.readUInt32BE(position + 1);
        let data = body.subarray(position + 5, position + 5 + length);
        if (flag === 1) data = zlib.gunzipSync(data);
        result.messages.push({ compressed: flag === 1, data });
        position += 5 + length;
      }
      session.close();
      resolve(result);
    });
    stream.end(frame);
  });
}

// --- cases ------------------------------------------------------------------------------------

const CASES = {
  async ServerLive(ctx) {
    const response = expectOk(await unary(ctx.client, 'ServerLive', {}), 'ServerLive');
    checkEqual(response.live, true, 'live');
    return { live: response.live };
  },

  async ServerReady(ctx) {
    const response = expectOk(await unary(ctx.client, 'ServerReady', {}), 'ServerReady');
    checkEqual(response.ready, true, 'ready');
    return { ready: response.ready };
  },

  async ServerMetadata(ctx) {
    const response = expectOk(await unary(ctx.client, 'ServerMetadata', {}), 'ServerMetadata');
    check(response.name.length > 0, 'empty server name');
    return { name: response.name, version: response.version, extensions: response.extensions };
  },

  async ModelMetadata(ctx) {
    const response = expectOk(
      await unary(ctx.client, 'ModelMetadata', { name: 'simple' }),
      'ModelMetadata',
    );
    const tensors = (list) =>
      list.map((t) => ({ name: t.name, datatype: t.datatype, shape: t.shape.map(Number) }));
    const details = {
      name: response.name,
      versions: response.versions,
      platform: response.platform,
      inputs: tensors(response.inputs),
      outputs: tensors(response.outputs),
    };
    checkEqual(details.name, 'simple', 'name');
    checkEqual(details.inputs, [
      { name: 'INPUT0', datatype: 'INT32', shape: [-1, 16] },
      { name: 'INPUT1', datatype: 'INT32', shape: [-1, 16] },
    ], 'inputs');
    checkEqual(details.outputs, [
      { name: 'OUTPUT0', datatype: 'INT32', shape: [-1, 16] },
      { name: 'OUTPUT1', datatype: 'INT32', shape: [-1, 16] },
    ], 'outputs');
    return details;
  },

  async ModelConfig(ctx) {
    const response = expectOk(
      await unary(ctx.client, 'ModelConfig', { name: 'simple' }),
      'ModelConfig',
    );
    const config = response.config;
    const tensors = (list) =>
      list.map((t) => ({ name: t.name, data_type: t.data_type, dims: t.dims.map(Number) }));
    const details = {
      name: config.name,
      platform: config.platform,
      backend: config.backend,
      max_batch_size: config.max_batch_size,
      input: tensors(config.input),
      output: tensors(config.output),
    };
    checkEqual(details.name, 'simple', 'name');
    checkEqual(details.max_batch_size, 8, 'max_batch_size');
    checkEqual(details.input, [
      { name: 'INPUT0', data_type: 'TYPE_INT32', dims: [16] },
      { name: 'INPUT1', data_type: 'TYPE_INT32', dims: [16] },
    ], 'input');
    return details;
  },

  async ModelReady(ctx) {
    const response = expectOk(
      await unary(ctx.client, 'ModelReady', { name: 'simple', version: '1' }),
      'ModelReady',
    );
    checkEqual(response.ready, true, 'ready');
    return { ready: response.ready };
  },

  async ModelReadyUnknown(ctx) {
    // What the server answers (NOT_FOUND, or ready=false) is checked by the test against what
    // grpcio sees; here, only that the answer is one of the two.
    const details = {};
    for (const [key, request] of [
      ['unknown_model', { name: UNKNOWN_MODEL }],
      ['unknown_version', { name: 'versioned', version: '9' }],
    ]) {
      const outcome = await unary(ctx.client, 'ModelReady', request);
      details[key] = outcome.error ? { error: outcome.error } : { ready: outcome.response.ready };
      const answer = details[key];
      check(
        answer.ready === false || (answer.error && answer.error.code === 'NOT_FOUND'),
        `${key}: neither ready=false nor NOT_FOUND: ${JSON.stringify(answer)}`,
      );
    }
    return details;
  },

  async ModelInferRaw(ctx) {
    const outcome = await unary(ctx.client, 'ModelInfer', simpleRequest(7, 'raw-7'));
    const response = expectOk(outcome, 'ModelInfer');
    checkEqual(response.id, 'raw-7', 'response id');
    checkEqual(response.model_name, 'simple', 'model_name');
    return { id: response.id, model_version: response.model_version, ...checkSimple(response, 7) };
  },

  async ModelInferTyped(ctx) {
    const { a, b } = simpleInputs(-5);
    const request = {
      model_name: 'simple',
      id: 'typed',
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], contents: { int_contents: a } },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], contents: { int_contents: b } },
      ],
      outputs: [{ name: 'OUTPUT1' }, { name: 'OUTPUT0' }],
    };
    const response = expectOk(await unary(ctx.client, 'ModelInfer', request), 'ModelInfer');
    return { id: response.id, ...checkSimple(response, -5) };
  },

  async ModelInferMlpBatch(ctx) {
    // Exactly representable inputs, so the test can recompute the model's answer.
    const batch = 4;
    const values = Array.from({ length: batch * 64 }, (_, i) => ((i % 17) - 8) / 8);
    const request = {
      model_name: 'mlp',
      inputs: [{ name: 'INPUT__0', datatype: 'FP32', shape: [batch, 64] }],
      raw_input_contents: [float32Bytes(values)],
    };
    const response = expectOk(await unary(ctx.client, 'ModelInfer', request), 'ModelInfer mlp');
    const out = output(response, 'OUTPUT__0', readFloat32);
    check(out.raw, 'no raw_output_contents');
    checkEqual(out.tensor.datatype, 'FP32', 'datatype');
    checkEqual(out.tensor.shape.map(Number), [batch, 10], 'shape');
    check(out.values.every(Number.isFinite), 'non-finite output');
    return { shape: out.tensor.shape.map(Number), OUTPUT__0: out.values };
  },

  async ModelInferVersioned(ctx) {
    const answers = {};
    for (const version of ['1', '2', '3']) {
      const request = {
        model_name: 'versioned',
        model_version: version,
        inputs: [
          {
            name: 'INPUT0',
            datatype: 'FP32',
            shape: [1, 4],
            contents: { fp32_contents: [1, 2, 3, 4.5] },
          },
        ],
      };
      const response = expectOk(await unary(ctx.client, 'ModelInfer', request), `v${version}`);
      const out = output(response, 'OUTPUT0', readFloat32);
      const values = out.raw ? out.values : out.tensor.contents.fp32_contents;
      checkEqual(response.model_version, version, 'model_version');
      checkEqual(values, [1, 2, 3, 4.5].map((v) => v * Number(version)), `v${version} OUTPUT0`);
      answers[version] = values;
    }
    return answers;
  },

  async ModelInferString(ctx) {
    const a = Array.from({ length: 16 }, (_, k) => String(k * 11));
    const b = Array.from({ length: 16 }, (_, k) => String(100 - k));
    const request = {
      model_name: 'simple_string',
      inputs: [
        { name: 'INPUT0', datatype: 'BYTES', shape: [16] },
        { name: 'INPUT1', datatype: 'BYTES', shape: [16] },
      ],
      raw_input_contents: [bytesTensor(a), bytesTensor(b)],
    };
    const response = expectOk(await unary(ctx.client, 'ModelInfer', request), 'simple_string');
    const sum = output(response, 'OUTPUT0', readBytesTensor);
    const difference = output(response, 'OUTPUT1', readBytesTensor);
    check(sum.raw, 'no raw_output_contents');
    checkEqual(sum.tensor.datatype, 'BYTES', 'datatype');
    checkEqual(sum.values, a.map((v, k) => String(Number(v) + Number(b[k]))), 'OUTPUT0');
    checkEqual(difference.values, a.map((v, k) => String(Number(v) - Number(b[k]))), 'OUTPUT1');
    return { OUTPUT0: sum.values, OUTPUT1: difference.values };
  },

  async ModelInferUnknownModel(ctx) {
    const request = { ...simpleRequest(1), model_name: UNKNOWN_MODEL };
    const error = expectError(await unary(ctx.client, 'ModelInfer', request), 'NOT_FOUND', 'infer');
    const named = error.details.includes(UNKNOWN_MODEL);
    check(named, `the message does not name the model: ${error.details}`);
    return { error };
  },

  async ModelInferWrongShape(ctx) {
    const request = {
      model_name: 'simple',
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 8] },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 8] },
      ],
      raw_input_contents: [int32Bytes(new Array(8).fill(1)), int32Bytes(new Array(8).fill(2))],
    };
    const outcome = await unary(ctx.client, 'ModelInfer', request);
    const error = expectError(outcome, 'INVALID_ARGUMENT', 'wrong shape');
    check(error.details.length > 0, 'no message');
    return { error };
  },

  async ModelInferWrongDatatype(ctx) {
    const request = {
      model_name: 'simple',
      inputs: ['INPUT0', 'INPUT1'].map((name) => ({
        name,
        datatype: 'FP32',
        shape: [1, 16],
        contents: { fp32_contents: new Array(16).fill(0.5) },
      })),
    };
    const outcome = await unary(ctx.client, 'ModelInfer', request);
    return { error: expectError(outcome, 'INVALID_ARGUMENT', 'wrong datatype') };
  },

  async LargeMessage64MiB(ctx) {
    return largeRoundTrip(ctx, 64);
  },

  async LargeMessage100MiB(ctx) {
    return largeRoundTrip(ctx, 100);
  },

  async StreamInfer1000(ctx) {
    const count = 1000;
    const stream = openStream(ctx.client);
    for (let i = 0; i < count; i++) stream.call.write(simpleRequest(i, String(i)));
    stream.call.end();
    const status = await stream.done;
    checkEqual(status.code, 'OK', 'stream status');
    const ids = stream.replies.map((r) => r.infer_response.id);
    const errors = stream.replies.filter((r) => r.error_message).map((r) => r.error_message);
    checkEqual(errors.slice(0, 3), [], 'error messages');
    checkEqual(stream.replies.length, count, 'replies');
    const sortedIds = [...ids].sort((x, y) => x - y);
    checkEqual(sortedIds, Array.from({ length: count }, (_, i) => String(i)), 'ids');
    const bad = [];
    for (const reply of stream.replies) {
      try {
        const id = reply.infer_response.id;
        checkSimple(reply.infer_response, Number(id), `id ${id}`);
      } catch (error) {
        bad.push(error.message);
      }
    }
    checkEqual(bad.slice(0, 3), [], 'wrong answers');
    const outOfOrder = ids.filter((id, i) => id !== String(i)).length;
    const correct = count - bad.length;
    return { replies: stream.replies.length, correct, out_of_order: outOfOrder };
  },

  async StreamSomeBad(ctx) {
    // Bad messages: an unknown model and a wrong shape. Each gets an error reply naming the
    // request, the good ones their answers, and the stream stays open for more.
    const stream = openStream(ctx.client);
    const plan = [];
    const send = (i) => {
      let request = simpleRequest(i, `m${i}`);
      let kind = 'good';
      if (i % 4 === 1) {
        request = { ...request, model_name: UNKNOWN_MODEL };
        kind = 'unknown';
      } else if (i % 4 === 3) {
        request.inputs = request.inputs.map((t) => ({ ...t, shape: [2, 8] }));
        kind = 'shape';
      }
      plan.push({ id: `m${i}`, kind, seed: i });
      stream.call.write(request);
    };
    for (let i = 0; i < 8; i++) send(i);
    await stream.waitFor(8);
    check(!stream.ended, 'the stream ended after the bad messages');
    for (let i = 8; i < 12; i++) send(i);
    await stream.waitFor(12);
    stream.call.end();
    const status = await stream.done;
    checkEqual(status.code, 'OK', 'stream status');
    checkEqual(stream.replies.length, plan.length, 'replies');
    const byId = Object.fromEntries(stream.replies.map((r) => [r.infer_response.id, r]));
    const errors = {};
    for (const { id, kind, seed } of plan) {
      const reply = byId[id];
      check(reply, `no reply for ${id}`);
      if (kind === 'good') {
        checkEqual(reply.error_message, '', `${id} error_message`);
        checkSimple(reply.infer_response, seed, id);
      } else {
        check(reply.error_message.length > 0, `${id} (${kind}) has no error_message`);
        errors[kind] = reply.error_message;
      }
    }
    return { replies: stream.replies.length, errors };
  },

  async StreamHalfClose(ctx) {
    // The client half-closes right after its requests; the server answers all of them, then
    // ends the call with OK.
    const stream = openStream(ctx.client);
    for (let i = 0; i < 5; i++) stream.call.write(simpleRequest(100 + i, `h${i}`));
    stream.call.end();
    const status = await stream.done;
    checkEqual(status.code, 'OK', 'status');
    checkEqual(stream.replies.length, 5, 'replies');
    for (const reply of stream.replies) {
      checkSimple(reply.infer_response, 100 + Number(reply.infer_response.id.slice(1)));
    }
    // A stream closed at once, with nothing sent, ends with OK and no reply.
    const empty = openStream(ctx.client);
    empty.call.end();
    const emptyStatus = await empty.done;
    checkEqual(emptyStatus.code, 'OK', 'empty stream status');
    checkEqual(empty.replies.length, 0, 'empty stream replies');
    return { replies: stream.replies.map((r) => r.infer_response.id), status: status.code };
  },

  async StreamCancel(ctx) {
    // Cancel after some answers, and cancel with a slow request in flight; the server stays
    // healthy for the next calls on the same channel.
    const stream = openStream(ctx.client);
    for (let i = 0; i < 20; i++) stream.call.write(simpleRequest(i, String(i)));
    await stream.waitFor(5);
    stream.call.cancel();
    const status = await stream.done;
    checkEqual(status.code, 'CANCELLED', 'status after cancel');

    const slow = openStream(ctx.client);
    slow.call.write(sleepyRequest(1.0, 1, 'slow'));
    await sleep(200);
    slow.call.cancel();
    const slowStatus = await slow.done;
    checkEqual(slowStatus.code, 'CANCELLED', 'status after cancelling a running request');

    const after = expectOk(await unary(ctx.client, 'ModelInfer', simpleRequest(42)), 'after');
    checkSimple(after, 42);
    const sleepy = expectOk(
      await unary(ctx.client, 'ModelInfer', sleepyRequest(0, 3)),
      'sleepy after cancel',
    );
    checkSleepy(sleepy, 0, 3);
    const next = openStream(ctx.client);
    next.call.write(simpleRequest(43, 'next'));
    next.call.end();
    checkEqual((await next.done).code, 'OK', 'next stream status');
    checkSimple(next.replies[0].infer_response, 43);
    return { replies_before_cancel: stream.replies.length, status: status.code };
  },

  async DeadlineExceeded(ctx) {
    const expired = await unary(ctx.client, 'ModelInfer', sleepyRequest(1.0, 1), {
      timeoutMs: 200,
    });
    const error = expectError(expired, 'DEADLINE_EXCEEDED', 'slow call');
    check(expired.ms < 900, `the call took ${expired.ms} ms to expire`);
    const outcome = await unary(ctx.client, 'ModelInfer', sleepyRequest(0, 5), {
      timeoutMs: 30000,
    });
    const values = checkSleepy(expectOk(outcome, 'next call'), 0, 5);
    return { error, expired_after_ms: expired.ms, next: values };
  },

  async ConcurrentCalls500(ctx) {
    const started = Date.now();
    const count = 500;
    const outcomes = await Promise.all(
      Array.from({ length: count }, (_, i) =>
        unary(ctx.client, 'ModelInfer', simpleRequest(i * 3, `c${i}`), { timeoutMs: 60000 }),
      ),
    );
    const failures = [];
    outcomes.forEach((outcome, i) => {
      try {
        const response = expectOk(outcome, `call ${i}`);
        checkEqual(response.id, `c${i}`, 'id');
        checkSimple(response, i * 3, `call ${i}`);
      } catch (error) {
        failures.push(error.message);
      }
    });
    checkEqual(failures.slice(0, 3), [], 'failures');
    return { calls: count, ms: Date.now() - started };
  },

  async ManyChannels(ctx) {
    // Eight channels, each with its own connection (a local subchannel pool), 50 calls on each.
    const started = Date.now();
    const clients = Array.from({ length: 8 }, (_, c) =>
      makeClient(ctx, { 'grpc.use_local_subchannel_pool': 1, 'grpc.primary_user_agent': `ch${c}` }),
    );
    const results = await Promise.all(
      clients.map(async (client, c) => {
        const outcomes = await Promise.all(
          Array.from({ length: 50 }, (_, i) =>
            unary(client, 'ModelInfer', simpleRequest(c * 1000 + i, `${c}/${i}`), {
              timeoutMs: 60000,
            }),
          ),
        );
        outcomes.forEach((outcome, i) => {
          const response = expectOk(outcome, `channel ${c} call ${i}`);
          checkEqual(response.id, `${c}/${i}`, 'id');
          checkSimple(response, c * 1000 + i, `channel ${c} call ${i}`);
        });
        return outcomes.length;
      }),
    );
    const calls = results.reduce((x, y) => x + y, 0);
    return { channels: clients.length, calls, ms: Date.now() - started };
  },

  async MetadataRoundTrip(ctx) {
    const metadata = new grpc.Metadata();
    metadata.set('x-interop-text', 'hello from grpc-js');
    metadata.add('x-interop-repeated', 'one');
    metadata.add('x-interop-repeated', 'two');
    metadata.set('x-interop-bin', Buffer.from([0, 1, 2, 253, 254, 255]));
    const outcome = await unary(ctx.client, 'ModelInfer', simpleRequest(9), { metadata });
    const response = expectOk(outcome, 'call with metadata');
    checkSimple(response, 9);
    const health = expectOk(await unary(ctx.client, 'ServerLive', {}, { metadata }), 'ServerLive');
    checkEqual(health.live, true, 'live');
    check(outcome.headers !== null, 'no response headers');
    check(outcome.trailers !== null, 'no trailers');
    return {
      header_keys: Object.keys(outcome.headers).sort(),
      trailer_keys: Object.keys(outcome.trailers).sort(),
    };
  },

  async GzipRequests(ctx) {
    return compressedCalls(ctx, 2, 'gzip');
  },

  async DeflateRequests(ctx) {
    return compressedCalls(ctx, 1, 'deflate');
  },

  async CompressionOnTheWire(ctx) {
    // With node:http2 alone: a gzip-compressed ServerLive request (compressed flag set), and
    // what the server says and does about compression.
    const result = await rawGrpcCall(
      ctx.address,
      '/inference.GRPCInferenceService/ServerLive',
      Buffer.alloc(0),
      { compress: true },
    );
    const status = (result.trailers || result.headers)['grpc-status'];
    checkEqual(status, '0', 'grpc-status');
    checkEqual(result.messages.length, 1, 'messages');
    // ServerLiveResponse {live: true} is the two bytes 08 01.
    checkEqual([...result.messages[0].data], [8, 1], 'response bytes');
    return {
      grpc_accept_encoding: result.headers['grpc-accept-encoding'] || null,
      response_encoding: result.headers['grpc-encoding'] || null,
      response_compressed: result.messages[0].compressed,
    };
  },

  async KeepaliveIdle(ctx) {
    return keepalive(ctx, async () => {
      await sleep(4500);
    });
  },

  async KeepaliveDuringCall(ctx) {
    return keepalive(ctx, async (client) => {
      const outcome = await unary(client, 'ModelInfer', sleepyRequest(3.0, 7), {
        timeoutMs: 30000,
      });
      checkSleepy(expectOk(outcome, 'slow call'), 3.0, 7);
    });
  },

  async TlsServerLive(ctx) {
    check(ctx.tlsAddress && ctx.rootCert, 'no --tls-address/--root-cert given');
    const ca = fs.readFileSync(ctx.rootCert);
    // ALPN, seen by a plain TLS connection offering h2 only.
    const [host, port] = ctx.tlsAddress.split(/:(?=\d+$)/);
    const alpn = await new Promise((resolve, reject) => {
      const socket = tls.connect({ host, port: Number(port), ca, ALPNProtocols: ['h2'] }, () => {
        const protocol = socket.alpnProtocol;
        socket.end();
        resolve(protocol);
      });
      socket.on('error', reject);
    });
    checkEqual(alpn, 'h2', 'negotiated ALPN protocol');
    const client = makeClient(ctx, {}, ctx.tlsAddress, grpc.credentials.createSsl(ca));
    const live = expectOk(await unary(client, 'ServerLive', {}), 'ServerLive over TLS');
    checkEqual(live.live, true, 'live');
    const infer = await unary(client, 'ModelInfer', simpleRequest(11));
    const response = expectOk(infer, 'infer over TLS');
    checkSimple(response, 11);
    const stream = openStream(client);
    for (let i = 0; i < 10; i++) stream.call.write(simpleRequest(i, String(i)));
    stream.call.end();
    checkEqual((await stream.done).code, 'OK', 'stream over TLS');
    checkEqual(stream.replies.length, 10, 'stream replies');
    return { alpn, live: live.live };
  },

  async TlsUntrustedCertificate(ctx) {
    check(ctx.tlsAddress, 'no --tls-address given');
    // The system roots do not include the test CA: the handshake must fail.
    const client = makeClient(ctx, {}, ctx.tlsAddress, grpc.credentials.createSsl());
    const outcome = await unary(client, 'ServerLive', {}, { timeoutMs: 5000 });
    return { error: expectError(outcome, 'UNAVAILABLE', 'untrusted server') };
  },

  async RepositoryIndex(ctx) {
    const response = expectOk(await unary(ctx.client, 'RepositoryIndex', {}), 'RepositoryIndex');
    const models = response.models.map((m) => [m.name, m.version, m.state]);
    const simple = models.some(([n, v, s]) => n === 'simple' && v === '1' && s === 'READY');
    check(simple, 'simple v1 missing');
    const ready = expectOk(
      await unary(ctx.client, 'RepositoryIndex', { ready: true }),
      'RepositoryIndex ready',
    );
    return { models, ready: ready.models.map((m) => [m.name, m.version, m.state]) };
  },

  async ModelStatistics(ctx) {
    // cnn is used by no other case: exactly three successful inferences.
    const values = Array.from({ length: 3 * 32 * 32 }, (_, i) => (i % 5) / 4);
    const request = {
      model_name: 'cnn',
      inputs: [{ name: 'INPUT__0', datatype: 'FP32', shape: [1, 3, 32, 32] }],
      raw_input_contents: [float32Bytes(values)],
    };
    for (let i = 0; i < 3; i++) {
      expectOk(await unary(ctx.client, 'ModelInfer', request), `cnn ${i}`);
    }
    const response = expectOk(
      await unary(ctx.client, 'ModelStatistics', { name: 'cnn' }),
      'ModelStatistics',
    );
    checkEqual(response.model_stats.length, 1, 'model_stats');
    const stats = response.model_stats[0];
    const details = {
      name: stats.name,
      version: stats.version,
      inference_count: stats.inference_count,
      execution_count: stats.execution_count,
      success: stats.inference_stats.success.count,
      fail: stats.inference_stats.fail.count,
      success_ns: stats.inference_stats.success.ns,
    };
    checkEqual(details.success, '3', 'success count');
    const unknown = await unary(ctx.client, 'ModelStatistics', { name: UNKNOWN_MODEL });
    details.unknown = expectError(unknown, 'NOT_FOUND', 'unknown model statistics');
    return details;
  },

  async HealthCheck(ctx) {
    const details = {};
    for (const service of ['', 'inference.GRPCInferenceService']) {
      const outcome = await unary(ctx.health, 'Check', { service });
      const response = expectOk(outcome, `Check '${service}'`);
      details[service || '(server)'] = response.status;
      checkEqual(response.status, 'SERVING', `status of '${service}'`);
    }
    details.unknown = expectError(
      await unary(ctx.health, 'Check', { service: 'no.such.Service' }),
      'NOT_FOUND',
      'unknown service',
    );
    return details;
  },

  async HealthWatch(ctx) {
    const call = ctx.health.Watch({ service: '' }, new grpc.Metadata(), {
      deadline: deadlineIn(10000),
    });
    const replies = [];
    call.on('data', (reply) => replies.push(reply.status));
    const status = await new Promise((resolve) => {
      call.on('error', () => {});
      call.on('status', resolve);
    });
    return { code: statusName(status.code), details: status.details, replies };
  },

  async UnknownMethod(ctx) {
    const outcome = await new Promise((resolve) => {
      ctx.client.makeUnaryRequest(
        '/inference.GRPCInferenceService/NoSuchMethod',
        (x) => x,
        (x) => x,
        Buffer.alloc(0),
        new grpc.Metadata(),
        { deadline: deadlineIn(10000) },
        (err) => {
          resolve(err ? { code: statusName(err.code), details: err.details } : { code: 'OK' });
        },
      );
    });
    checkEqual(outcome.code, 'UNIMPLEMENTED', 'status');
    const live = expectOk(await unary(ctx.client, 'ServerLive', {}), 'ServerLive after');
    checkEqual(live.live, true, 'live');
    return { error: outcome };
  },
};

async function compressedCalls(ctx, algorithm, name) {
  // Sequential calls: grpc-js compresses the first without knowing what the server accepts,
  // and the later ones only if the server's grpc-accept-encoding lists the algorithm.
  const client = makeClient(ctx, {
    'grpc.default_compression_algorithm': algorithm,
    'grpc.max_receive_message_length': -1,
  });
  const data = Buffer.alloc(MiB);
  for (let i = 0; i < data.length; i++) data[i] = (i >> 10) % 7; // compresses well
  const answers = [];
  for (let i = 0; i < 3; i++) {
    const outcome = await unary(client, 'ModelInfer', identityRequest(data, `${name}${i}`));
    const response = expectOk(outcome, `${name} call ${i}`);
    const out = output(response, 'OUTPUT0', (b) => b);
    check(out.values.equals(data), `${name} call ${i}: answer differs from the request`);
    answers.push(response.id);
  }
  const simple = expectOk(await unary(client, 'ModelInfer', simpleRequest(21)), `${name} simple`);
  checkSimple(simple, 21);
  const stream = openStream(client);
  for (let i = 0; i < 5; i++) stream.call.write(simpleRequest(i, String(i)));
  stream.call.end();
  checkEqual((await stream.done).code, 'OK', `${name} stream`);
  checkEqual(stream.replies.length, 5, `${name} stream replies`);
  return { calls: answers, stream_replies: stream.replies.length };
}

async function keepalive(ctx, during) {
  // Pings every second (grpc-js sets no lower bound), also while no call is open; the
  // connection must stay up and usable, with every ping answered and no GOAWAY.
  const client = makeClient(ctx, {
    'grpc.keepalive_time_ms': 1000,
    'grpc.keepalive_timeout_ms': 2000,
    'grpc.keepalive_permit_without_calls': 1,
    'grpc.use_local_subchannel_pool': 1,
  });
  await waitReady(client);
  expectOk(await unary(client, 'ServerLive', {}), 'first call');
  const mark = logLines.length;
  const stop = watchStates(client);
  await during(client);
  const after = expectOk(await unary(client, 'ModelInfer', simpleRequest(5)), 'call afterwards');
  checkSimple(after, 5);
  const states = stop();
  const lines = logLines.slice(mark);
  const details = {
    pings_sent: lines.filter((l) => /Sending ping/.test(l)).length,
    pings_answered: lines.filter((l) => /Received ping response/.test(l)).length,
    goaway: lines.filter((l) => /GOAWAY/.test(l)),
    excess_pings: lines.filter((l) => /excess pings/.test(l)),
    ping_failures: lines.filter((l) => /Ping (timeout|failed|send failed)/.test(l)),
    states,
  };
  ctx.partial = details;
  checkEqual(details.goaway, [], 'GOAWAY received');
  checkEqual(details.excess_pings, [], 'excess pings');
  checkEqual(details.ping_failures, [], 'ping failures');
  checkEqual(states, ['READY'], 'connectivity states');
  check(details.pings_answered >= 2, `only ${details.pings_answered} pings answered`);
  return details;
}

// --- main -------------------------------------------------------------------------------------

const CASE_TIMEOUT_MS = 60000;

async function runCase(ctx, name) {
  const started = Date.now();
  let timer;
  try {
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(
        () => reject(new CaseFailure(`timed out after ${CASE_TIMEOUT_MS} ms`)),
        CASE_TIMEOUT_MS,
      );
    });
    const details = await Promise.race([CASES[name](ctx), timeout]);
    return { name, ok: true, ms: Date.now() - started, details };
  } catch (error) {
    const message =
      error instanceof CaseFailure ? error.message : String((error && error.stack) || error);
    const details = { ...ctx.partial, error: message };
    return { name, ok: false, ms: Date.now() - started, details };
  } finally {
    ctx.partial = {};
    clearTimeout(timer);
    while (ctx.clients.length > 1) ctx.clients.pop().close();
  }
}

async function main() {
  let args;
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (error) {
    process.stderr.write(`${error.message}\n`);
    process.exit(2);
  }
  if (args.list) {
    for (const name of Object.keys(CASES)) process.stdout.write(`${name}\n`);
    return;
  }
  const definition = protoLoader.loadFileDescriptorSetFromBuffer(
    fs.readFileSync(args.descriptors),
    { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true },
  );
  const loaded = grpc.loadPackageDefinition(definition);
  const ctx = {
    address: args.address,
    tlsAddress: args.tlsAddress,
    rootCert: args.rootCert,
    Service: loaded.inference.GRPCInferenceService,
    clients: [],
    partial: {}, // what a case observed, reported with its failure
  };
  ctx.client = makeClient(ctx);
  ctx.health = new loaded.grpc.health.v1.Health(args.address, grpc.credentials.createInsecure());
  const names = args.cases || Object.keys(CASES);
  for (const name of names) {
    const result = CASES[name]
      ? await runCase(ctx, name)
      : { name, ok: false, details: { error: 'no such case' } };
    process.stdout.write(`${JSON.stringify(result)}\n`);
  }
  ctx.client.close();
  ctx.health.close();
}

main().then(
  () => process.exit(0),
  (error) => {
    process.stderr.write(`${error && error.stack || error}\n`);
    process.exit(1);
  },
);

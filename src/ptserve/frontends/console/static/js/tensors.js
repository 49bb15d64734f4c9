// Tensors for the try-it page: typed or random values, files, the request body (JSON, or the
// binary tensor extension where JSON cannot carry a type), and outputs laid out as tables.
// Pure: no DOM.

export const TYPES = {
  BOOL: { size: 1, kind: "bool" },
  UINT8: { size: 1, kind: "uint", min: 0, max: 255 },
  UINT16: { size: 2, kind: "uint", min: 0, max: 65535 },
  UINT32: { size: 4, kind: "uint", min: 0, max: 4294967295 },
  UINT64: { size: 8, kind: "uint", min: 0, max: 2n ** 64n - 1n },
  INT8: { size: 1, kind: "int", min: -128, max: 127 },
  INT16: { size: 2, kind: "int", min: -32768, max: 32767 },
  INT32: { size: 4, kind: "int", min: -2147483648, max: 2147483647 },
  INT64: { size: 8, kind: "int", min: -(2n ** 63n), max: 2n ** 63n - 1n },
  FP16: { size: 2, kind: "float", json: false },
  FP32: { size: 4, kind: "float" },
  FP64: { size: 8, kind: "float" },
  BF16: { size: 2, kind: "float", json: false },
  BYTES: { size: 0, kind: "bytes" },
};

export class InputError extends Error {}

export function elementCount(shape) {
  return shape.reduce((product, dim) => product * dim, 1);
}

/** Whether JSON can carry this type (the server takes FP16 and BF16 only as binary data). */
export function jsonCapable(datatype) {
  return TYPES[datatype] && TYPES[datatype].json !== false;
}

function flatten(value, out = []) {
  if (Array.isArray(value)) for (const item of value) flatten(item, out);
  else out.push(value);
  return out;
}

/**
 * Typed values for an input: a JSON array (flat or nested) or a JSON scalar, or else numbers
 * separated by commas, spaces or new lines (BYTES: one string per line). Checked against the
 * type and, when ``count`` is given, the element count; errors name the input and the problem.
 */
export function parseValues(text, datatype, name, count = null) {
  const type = TYPES[datatype];
  if (!type) throw new InputError(`input '${name}': unknown datatype ${datatype}`);
  const trimmed = text.trim();
  let values;
  let parsedJson = false;
  if (trimmed.startsWith("[") || trimmed.startsWith('"')) {
    try {
      values = flatten(JSON.parse(trimmed));
      parsedJson = true;
    } catch (error) {
      throw new InputError(`input '${name}': not valid JSON (${error.message})`);
    }
    // JSON.parse rounds integers beyond 2^53: integer types read the literals themselves.
    if (type.kind === "int" || type.kind === "uint") values = jsonTokens(trimmed);
  } else if (type.kind === "bytes") {
    values = trimmed ? trimmed.split(/\r?\n/) : [];
  } else {
    values = trimmed ? trimmed.split(/[\s,]+/).filter(Boolean) : [];
  }
  const out = values.map((item, index) => convert(item, type, datatype, name, index, parsedJson));
  if (count !== null && out.length !== count) {
    throw new InputError(
      `input '${name}': ${out.length} value${out.length === 1 ? "" : "s"} given, the shape needs ${count}`,
    );
  }
  return out;
}

/** The scalars of a JSON text in order, numbers kept as their literal text ({raw}). */
function jsonTokens(text) {
  const tokens = text.match(/"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null/g) || [];
  return tokens.map((token) => {
    if (token.startsWith('"')) return JSON.parse(token);
    if (token === "true" || token === "false") return token === "true";
    if (token === "null") return null;
    return { raw: token };
  });
}

function convert(item, type, datatype, name, index, fromJson) {
  const where = `input '${name}' element ${index}`;
  if (type.kind === "bytes") {
    if (typeof item !== "string") throw new InputError(`${where}: BYTES values must be strings`);
    return item;
  }
  if (type.kind === "bool") {
    if (item === true || item === "true" || item === "1" || item === 1) return true;
    if (item === false || item === "false" || item === "0" || item === 0) return false;
    throw new InputError(`${where}: BOOL values must be true or false, got ${JSON.stringify(item)}`);
  }
  if (typeof item === "string" && fromJson) {
    throw new InputError(`${where}: ${datatype} values must be numbers, got ${JSON.stringify(item)}`);
  }
  if (type.kind === "float") {
    const value = Number(item);
    if (typeof item === "boolean" || !Number.isFinite(value)) {
      throw new InputError(`${where}: ${datatype} values must be finite numbers, got ${JSON.stringify(item)}`);
    }
    return value;
  }
  // Integers: checked exactly (64-bit values beyond 2^53 stay BigInt).
  const text = item !== null && typeof item === "object" && "raw" in item ? item.raw : String(item);
  if (typeof item === "boolean" || item === null || !/^-?\d+$/.test(text)) {
    throw new InputError(`${where}: ${datatype} values must be integers, got ${typeof item === "object" && item !== null ? text : JSON.stringify(item)}`);
  }
  const big = BigInt(text);
  if (big < BigInt(type.min) || big > BigInt(type.max)) {
    throw new InputError(`${where}: ${text} is out of range for ${datatype} (${type.min} to ${type.max})`);
  }
  return Number.isSafeInteger(Number(big)) ? Number(big) : big;
}

/** A seeded generator (mulberry32), so that a random input can be sent again as it was. */
export function generator(seed) {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** ``count`` random values of a type: floats in [-1, 1), integers in [0, 10) (within range),
 * booleans, and BYTES as decimal digits. */
export function randomValues(datatype, count, random) {
  const type = TYPES[datatype];
  const out = new Array(count);
  for (let i = 0; i < count; i += 1) {
    const r = random();
    if (type.kind === "float") out[i] = Math.fround(r * 2 - 1);
    else if (type.kind === "bool") out[i] = r < 0.5;
    else if (type.kind === "bytes") out[i] = String(Math.floor(r * 100));
    else out[i] = Math.floor(r * 10);
  }
  return out;
}

/** IEEE half-precision bits of a number, rounded to nearest even. */
export function float16Bits(value) {
  const f32 = new Float32Array([value]);
  const bits = new Uint32Array(f32.buffer)[0];
  const sign = (bits >>> 16) & 0x8000;
  const exponent = (bits >>> 23) & 0xff;
  let mantissa = bits & 0x7fffff;
  if (exponent === 0xff) return sign | 0x7c00 | (mantissa ? 0x200 : 0);
  let e = exponent - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mantissa |= 0x800000;
    const shift = 14 - e;
    let half = mantissa >>> shift;
    const remainder = mantissa & ((1 << shift) - 1);
    const halfway = 1 << (shift - 1);
    if (remainder > halfway || (remainder === halfway && (half & 1))) half += 1;
    return sign | half;
  }
  let half = (e << 10) | (mantissa >>> 13);
  const remainder = mantissa & 0x1fff;
  if (remainder > 0x1000 || (remainder === 0x1000 && (half & 1))) half += 1;
  return sign | half;
}

/** bfloat16 bits of a number: float32's upper half, rounded to nearest even. */
export function bfloat16Bits(value) {
  const f32 = new Float32Array([value]);
  const bits = new Uint32Array(f32.buffer)[0];
  if ((bits & 0x7f800000) === 0x7f800000 && bits & 0x7fffff) return (bits >>> 16) | 0x40;
  const rounding = 0x7fff + ((bits >>> 16) & 1);
  return ((bits + rounding) >>> 16) & 0xffff;
}

/** A tensor's bytes as the binary tensor extension carries them (little-endian; BYTES: each
 * element a 4-byte length, then its UTF-8 bytes). */
export function encodeBinary(values, datatype) {
  const type = TYPES[datatype];
  if (type.kind === "bytes") {
    const encoder = new TextEncoder();
    const parts = values.map((v) => encoder.encode(String(v)));
    const out = new Uint8Array(parts.reduce((n, p) => n + 4 + p.length, 0));
    const view = new DataView(out.buffer);
    let offset = 0;
    for (const part of parts) {
      view.setUint32(offset, part.length, true);
      out.set(part, offset + 4);
      offset += 4 + part.length;
    }
    return out;
  }
  const out = new Uint8Array(values.length * type.size);
  const view = new DataView(out.buffer);
  values.forEach((v, i) => {
    const at = i * type.size;
    switch (datatype) {
      case "BOOL": view.setUint8(at, v ? 1 : 0); break;
      case "UINT8": view.setUint8(at, Number(v)); break;
      case "INT8": view.setInt8(at, Number(v)); break;
      case "UINT16": view.setUint16(at, Number(v), true); break;
      case "INT16": view.setInt16(at, Number(v), true); break;
      case "UINT32": view.setUint32(at, Number(v), true); break;
      case "INT32": view.setInt32(at, Number(v), true); break;
      case "UINT64": view.setBigUint64(at, BigInt(v), true); break;
      case "INT64": view.setBigInt64(at, BigInt(v), true); break;
      case "FP16": view.setUint16(at, float16Bits(v), true); break;
      case "BF16": view.setUint16(at, bfloat16Bits(v), true); break;
      case "FP32": view.setFloat32(at, v, true); break;
      case "FP64": view.setFloat64(at, v, true); break;
      default: throw new InputError(`cannot encode ${datatype}`);
    }
  });
  return out;
}

/** The byte size a raw tensor file must have (null for BYTES, whose size varies). */
export function rawByteSize(datatype, count) {
  const type = TYPES[datatype];
  return type.kind === "bytes" ? null : type.size * count;
}

function jsonValue(v) {
  return typeof v === "bigint" ? `__BIG__${v}__BIG__` : v;
}

function stringify(value) {
  // 64-bit integers beyond 2^53 stay exact: written as bare digits.
  return JSON.stringify(value, (_, v) => jsonValue(v)).replace(/"__BIG__(-?\d+)__BIG__"/g, "$1");
}

/**
 * The infer request body. ``inputs``: [{name, datatype, shape, values} or {name, datatype,
 * shape, bytes: Uint8Array}]; an input goes as binary data when it comes as bytes or its type
 * cannot be JSON. ``outputs``: names requested as JSON. Returns {body, headerLength, header}:
 * headerLength is null for a plain JSON body.
 */
export function buildRequest(inputs, outputs, id = "") {
  const header = { inputs: [] };
  if (id) header.id = id;
  const binary = [];
  for (const input of inputs) {
    const entry = { name: input.name, shape: input.shape, datatype: input.datatype };
    if (input.bytes || !jsonCapable(input.datatype)) {
      const bytes = input.bytes || encodeBinary(input.values, input.datatype);
      entry.parameters = { binary_data_size: bytes.length };
      binary.push(bytes);
    } else {
      entry.data = input.values;
    }
    header.inputs.push(entry);
  }
  if (outputs) header.outputs = outputs.map((name) => ({ name, parameters: { binary_data: false } }));
  const text = stringify(header);
  if (!binary.length) return { body: text, headerLength: null, header };
  const head = new TextEncoder().encode(text);
  const size = binary.reduce((n, part) => n + part.length, head.length);
  const body = new Uint8Array(size);
  body.set(head, 0);
  let offset = head.length;
  for (const part of binary) {
    body.set(part, offset);
    offset += part.length;
  }
  return { body, headerLength: head.length, header };
}

/**
 * An output laid out for a table: rows over every dimension but the last, columns along it.
 * Returns {columns, rows: [{index: "[0, 1]", values}], total, shown}; at most ``maxRows`` rows.
 */
export function outputTable(output, maxRows = 64) {
  const shape = output.shape || [];
  const data = flatten(output.data || []);
  const columns = shape.length ? shape[shape.length - 1] : 1;
  const leading = shape.slice(0, -1);
  const rowCount = columns ? Math.ceil(data.length / columns) : 0;
  const rows = [];
  for (let r = 0; r < Math.min(rowCount, maxRows); r += 1) {
    const index = [];
    let rest = r;
    for (let d = leading.length - 1; d >= 0; d -= 1) {
      index.unshift(rest % leading[d]);
      rest = Math.floor(rest / leading[d]);
    }
    rows.push({ index: `[${index.join(", ")}]`, values: data.slice(r * columns, (r + 1) * columns) });
  }
  return { columns, rows, total: rowCount, shown: rows.length };
}

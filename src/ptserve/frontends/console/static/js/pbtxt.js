// Triton's JSON rendering of a model configuration → protobuf text format (config.pbtxt).
// Pure: no DOM. The schema (model-config-schema.json) comes from the server's protobuf
// descriptors and says which strings are enum values, which objects are maps, and what
// message each field holds.

const INDENT = "  ";

function quote(text) {
  let out = '"';
  for (const ch of String(text)) {
    const code = ch.codePointAt(0);
    if (ch === '"') out += '\\"';
    else if (ch === "\\") out += "\\\\";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (code < 0x20 || code === 0x7f) out += `\\${code.toString(8).padStart(3, "0")}`;
    else out += ch;
  }
  return `${out}"`;
}

function scalar(value, kind) {
  if (kind === "string") return quote(value);
  if (kind === "enum") return String(value);
  if (kind === "bool") return value ? "true" : "false";
  if (kind === "number") {
    if (typeof value === "number") return Number.isInteger(value) ? value.toString() : String(value);
    return String(value);
  }
  // Unknown to the schema: write it the way its JSON type suggests.
  if (typeof value === "string") return quote(value);
  return String(value);
}

/** Whether a value is what an unset field reads as (proto3 leaves those out of the text). */
function isDefault(value, field) {
  if (field.kind === "enum") return value === field.zero || value === 0;
  if (field.kind === "string") return value === "";
  if (field.kind === "bool") return value === false;
  if (field.kind === "number") return value === 0;
  return false;
}

function message(object, typeName, schema, depth, lines) {
  const fields = (typeName && schema.messages[typeName]) || {};
  const pad = INDENT.repeat(depth);
  for (const [name, value] of Object.entries(object)) {
    const field = fields[name] || guess(value);
    if (field.kind === "map") {
      for (const [key, item] of Object.entries(value || {})) {
        lines.push(`${pad}${name} {`);
        lines.push(`${pad}${INDENT}key: ${scalar(key, field.key.kind)}`);
        if (field.value.kind === "message") {
          lines.push(`${pad}${INDENT}value {`);
          message(item, field.value.message, schema, depth + 2, lines);
          lines.push(`${pad}${INDENT}}`);
        } else {
          lines.push(`${pad}${INDENT}value: ${scalar(item, field.value.kind)}`);
        }
        lines.push(`${pad}}`);
      }
    } else if (field.repeated || Array.isArray(value)) {
      const items = Array.isArray(value) ? value : [value];
      if (!items.length) continue;
      if (field.kind === "message") {
        for (const item of items) {
          lines.push(`${pad}${name} {`);
          message(item, field.message, schema, depth + 1, lines);
          lines.push(`${pad}}`);
        }
      } else {
        lines.push(`${pad}${name}: [ ${items.map((item) => scalar(item, field.kind)).join(", ")} ]`);
      }
    } else if (field.kind === "message") {
      // A message that is present stays, even when empty: its presence means something
      // (e.g. dynamic_batching { } turns the dynamic batcher on).
      const inner = [];
      message(value || {}, field.message, schema, depth + 1, inner);
      if (inner.length) lines.push(`${pad}${name} {`, ...inner, `${pad}}`);
      else lines.push(`${pad}${name} { }`);
    } else if (!isDefault(value, field)) {
      lines.push(`${pad}${name}: ${scalar(value, field.kind)}`);
    }
  }
}

function guess(value) {
  if (Array.isArray(value)) return { ...guess(value[0]), repeated: true };
  if (value !== null && typeof value === "object") return { kind: "message", message: null };
  if (typeof value === "boolean") return { kind: "bool" };
  if (typeof value === "number") return { kind: "number" };
  return { kind: "string" };
}

/** The configuration as config.pbtxt text (fields at their proto3 defaults left out). */
export function toPbtxt(config, schema) {
  const lines = [];
  message(config, schema.root, schema, 0, lines);
  return `${lines.join("\n")}\n`;
}

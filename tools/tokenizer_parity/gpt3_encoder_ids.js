// Prints the gpt-3-encoder (npm) ids of every line of a file, one JSON array per line.
// Usage: node gpt3_encoder_ids.js <npm_dir> <lines_file>
// npm_dir holds node_modules/gpt-3-encoder. One process for all lines keeps tests fast.
'use strict';
const fs = require('fs');
const path = require('path');

const [npmDir, linesFile] = process.argv.slice(2);
if (!npmDir || !linesFile) {
  console.error('usage: node gpt3_encoder_ids.js <npm_dir> <lines_file>');
  process.exit(2);
}
const { encode } = require(path.join(npmDir, 'node_modules', 'gpt-3-encoder'));
const text = fs.readFileSync(linesFile, 'utf8');
const lines = text.split('\n');
if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
const out = lines.map((line) => JSON.stringify(encode(line)));
process.stdout.write(out.join('\n') + '\n');

#!/usr/bin/env node
'use strict';
// Reads versions, one per line, from standard input and prints them sorted.
const { sortVersions } = require('./semver');

let input = '';
process.stdin.on('data', (chunk) => { input += chunk; });
process.stdin.on('end', () => {
  const versions = input.split('\n').map((line) => line.trim()).filter(Boolean);
  for (const version of sortVersions(versions)) {
    console.log(version);
  }
});

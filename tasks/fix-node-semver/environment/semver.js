'use strict';
// Semantic versions (https://semver.org): parse, compare, sort.

const PATTERN = /^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+([0-9A-Za-z.-]+))?$/;

function parse(text) {
  const match = PATTERN.exec(String(text).trim());
  if (!match) {
    throw new Error(`not a semantic version: ${text}`);
  }
  return {
    major: match[1],
    minor: match[2],
    patch: match[3],
    prerelease: match[4] ? match[4].split('.') : [],
    build: match[5] || '',
  };
}

function compareIdentifiers(a, b) {
  if (a === b) return 0;
  return a < b ? -1 : 1;
}

// Negative when a < b, zero when they have the same precedence, positive when a > b.
function compare(a, b) {
  const x = parse(a);
  const y = parse(b);
  for (const key of ['major', 'minor', 'patch']) {
    const order = compareIdentifiers(x[key], y[key]);
    if (order !== 0) return order;
  }
  const length = Math.max(x.prerelease.length, y.prerelease.length);
  for (let i = 0; i < length; i += 1) {
    if (x.prerelease[i] === undefined) return -1;
    if (y.prerelease[i] === undefined) return 1;
    const order = compareIdentifiers(x.prerelease[i], y.prerelease[i]);
    if (order !== 0) return order;
  }
  return compareIdentifiers(x.build, y.build);
}

// A new array, lowest precedence first; versions of equal precedence keep their input order.
function sortVersions(list) {
  return [...list].sort(compare);
}

module.exports = { parse, compare, sortVersions };

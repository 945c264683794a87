'use strict';
// Semantic versions (https://semver.org): parse, compare, sort.

const PATTERN = /^v?(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+([0-9A-Za-z.-]+))?$/;

function parse(text) {
  const match = PATTERN.exec(String(text).trim());
  if (!match) {
    throw new Error(`not a semantic version: ${text}`);
  }
  return {
    major: Number(match[1]),
    minor: Number(match[2]),
    patch: Number(match[3]),
    prerelease: match[4] ? match[4].split('.') : [],
    build: match[5] || '',
  };
}

const NUMERIC = /^\d+$/;

function compareNumbers(a, b) {
  return a === b ? 0 : (a < b ? -1 : 1);
}

// Pre-release identifiers: numeric ones numerically and below the others, the rest in ASCII.
function compareIdentifiers(a, b) {
  const aNumeric = NUMERIC.test(a);
  const bNumeric = NUMERIC.test(b);
  if (aNumeric && bNumeric) return compareNumbers(Number(a), Number(b));
  if (aNumeric !== bNumeric) return aNumeric ? -1 : 1;
  return compareNumbers(a, b);
}

// Negative when a < b, zero when they have the same precedence, positive when a > b.
function compare(a, b) {
  const x = parse(a);
  const y = parse(b);
  for (const key of ['major', 'minor', 'patch']) {
    const order = compareNumbers(x[key], y[key]);
    if (order !== 0) return order;
  }
  // A release has higher precedence than any of its pre-releases.
  if (!x.prerelease.length || !y.prerelease.length) {
    return compareNumbers(y.prerelease.length, x.prerelease.length);
  }
  const length = Math.max(x.prerelease.length, y.prerelease.length);
  for (let i = 0; i < length; i += 1) {
    if (x.prerelease[i] === undefined) return -1;
    if (y.prerelease[i] === undefined) return 1;
    const order = compareIdentifiers(x.prerelease[i], y.prerelease[i]);
    if (order !== 0) return order;
  }
  return 0; // build metadata does not count
}

// A new array, lowest precedence first; versions of equal precedence keep their input order.
function sortVersions(list) {
  return [...list].sort(compare);
}

module.exports = { parse, compare, sortVersions };

'use strict';
const test = require('node:test');
const assert = require('node:assert');
const { execFileSync } = require('node:child_process');
const { parse, compare, sortVersions } = require('/app/semver.js');

const sign = (n) => Math.sign(n);

test('major, minor and patch compare numerically', () => {
  assert.strictEqual(sign(compare('1.9.0', '1.10.0')), -1);
  assert.strictEqual(sign(compare('10.0.0', '9.99.99')), 1);
  assert.strictEqual(sign(compare('1.0.10', '1.0.2')), 1);
  assert.strictEqual(compare('2.3.4', '2.3.4'), 0);
});

test('a pre-release is lower than its release', () => {
  assert.strictEqual(sign(compare('2.0.0-rc.1', '2.0.0')), -1);
  assert.strictEqual(sign(compare('2.0.0', '2.0.0-rc.1')), 1);
  assert.strictEqual(sign(compare('1.0.0-alpha', '0.9.9')), 1);
});

test('pre-release identifiers follow the specification', () => {
  const ordered = ['1.0.0-alpha', '1.0.0-alpha.1', '1.0.0-alpha.beta', '1.0.0-beta',
    '1.0.0-beta.2', '1.0.0-beta.11', '1.0.0-rc.1', '1.0.0'];
  for (let i = 0; i + 1 < ordered.length; i += 1) {
    assert.strictEqual(sign(compare(ordered[i], ordered[i + 1])), -1, `${ordered[i]} < ${ordered[i + 1]}`);
    assert.strictEqual(sign(compare(ordered[i + 1], ordered[i])), 1, `${ordered[i + 1]} > ${ordered[i]}`);
  }
  assert.strictEqual(sign(compare('1.0.0-2', '1.0.0-10')), -1);
  assert.strictEqual(sign(compare('1.0.0-9', '1.0.0-a')), -1);
  assert.strictEqual(sign(compare('1.0.0-A', '1.0.0-a')), -1);
  assert.strictEqual(sign(compare('1.0.0-x-y', '1.0.0-x.y')), 1);
});

test('build metadata is ignored', () => {
  assert.strictEqual(compare('1.0.0+a', '1.0.0+b'), 0);
  assert.strictEqual(compare('1.0.0-rc.1+build.9', '1.0.0-rc.1'), 0);
  assert.strictEqual(sign(compare('1.0.0+zzz', '1.0.1')), -1);
});

test('parse accepts a leading v and spaces, and rejects garbage', () => {
  const parsed = parse(' v1.2.3-beta.4+exp.sha.5114f85 ');
  assert.strictEqual(Number(parsed.major), 1);
  assert.strictEqual(Number(parsed.minor), 2);
  assert.strictEqual(Number(parsed.patch), 3);
  for (const bad of ['1.2', '1.2.3.4', 'one.two.three', '', '1.2.3-', 'v']) {
    assert.throws(() => parse(bad), Error, bad);
  }
});

test('sortVersions sorts a copy, stably', () => {
  const input = ['1.10.0', 'v1.2.0', '1.2.0-rc.1', '1.2.0+build.1', '0.9.0', '1.2.0', '1.9.0'];
  const copy = [...input];
  assert.deepStrictEqual(sortVersions(input),
    ['0.9.0', '1.2.0-rc.1', 'v1.2.0', '1.2.0+build.1', '1.2.0', '1.9.0', '1.10.0']);
  assert.deepStrictEqual(input, copy);
});

test('the command line sorts standard input', () => {
  const out = execFileSync('node', ['/app/sort-versions.js'],
    { input: '2.0.0\n2.0.0-rc.1\n\n1.10.0\n1.9.0\n' }).toString();
  assert.strictEqual(out, '1.9.0\n1.10.0\n2.0.0-rc.1\n2.0.0\n');
});

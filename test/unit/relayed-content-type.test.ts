import { describe, expect, it } from 'vitest';
import { relayableContentType } from '../../shared/contracts/openai.js';

/**
 * The content type a runtime's answer goes out with under the API's origin (second security review, L7): the whole
 * value is read, parameters included, and only what a legitimate answer carries (its media type and a UTF-8
 * charset) is relayed, rewritten to one canonical form.
 */
describe('relayableContentType', () => {
  it('relays JSON and SSE, bare or with a UTF-8 charset, in one canonical form', () => {
    expect(relayableContentType('application/json')).toBe('application/json');
    expect(relayableContentType('text/event-stream')).toBe('text/event-stream');
    expect(relayableContentType('application/json; charset=utf-8')).toBe('application/json; charset=utf-8');
    expect(relayableContentType('Application/JSON;charset=UTF-8')).toBe('application/json; charset=utf-8');
    expect(relayableContentType('text/event-stream; charset="utf-8"')).toBe('text/event-stream; charset=utf-8');
    expect(relayableContentType(' application/json ;  charset=utf-8 ')).toBe('application/json; charset=utf-8');
    // RFC 9110 allows empty parameters; they are dropped.
    expect(relayableContentType('application/json;')).toBe('application/json');
  });

  it('refuses a list of types, whatever follows the first `;`', () => {
    // What the reviewer's fake agent sent: browsers take the last type of a list, text/html.
    expect(relayableContentType('application/json; charset=utf-8, text/html')).toBeFalsy();
    expect(relayableContentType('application/json, text/html')).toBeFalsy();
    expect(relayableContentType('text/event-stream; charset=utf-8,text/html')).toBeFalsy();
    expect(relayableContentType('application/json; charset="utf-8, text/html"')).toBeFalsy();
  });

  it('refuses any parameter but a UTF-8 charset, and malformed values', () => {
    for (const value of [
      'application/json; charset=iso-8859-1',
      'application/json; charset=utf-7',
      'application/json; boundary=x',
      'application/json; charset=utf-8; charset=utf-8',
      'application/json; charset=utf-8; x=<script>',
      'application/json; text/html',
      'application/json; charset',
      'application/json; charset=',
      'application/json\r\nx-evil: 1',
      'application/json\u0000',
      'text/html',
      'text/html; charset=utf-8',
      'application/json-seq',
      '',
      ';',
    ]) {
      expect(relayableContentType(value), JSON.stringify(value)).toBeFalsy();
    }
  });
});

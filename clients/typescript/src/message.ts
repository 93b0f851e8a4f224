/**
 * A dex.v1 message in its canonical JSON form (or a part of one), as the server's JSON API and
 * the SDK's codecs hand it around.  Its own module, so that errors.ts and convert.ts, which
 * both use it, do not import each other.
 */
export type Message = Record<string, any>;

// Package fingerprint computes what makes two requests "the same request"
// for idempotency: a SHA-256 (a ledger.Fingerprint) over the method, the
// concrete target and the canonical body.
//
//	f, err := fingerprint.New(&fingerprint.Options{Exclude: []string{"client_ts", "meta.request_id"}})
//	fp, err := f.Sum(r.Method, r.URL.RequestURI(), fingerprint.BodyType(r.Header), body)
//
// # The model
//
// The target is the request's concrete target, the escaped path and the raw
// query, not its route pattern: the idempotency scope names the endpoint,
// the fingerprint names the resource, so a key reused on another order is a
// mismatch rather than a replay of the first order's answer.
//
// JSON bodies (application/json or any +json type) are canonicalised by a
// small recursive-descent parser bounded by Options.MaxDepth: object members
// sorted by name, insignificant whitespace dropped, strings re-escaped
// minimally, numbers kept exactly as written, and the fields named in
// Options.Exclude (client timestamps, request IDs: what differs between
// retries of one request) left out. A client that re-serialises its request
// still matches. A JSON body that does not parse is an error, never hashed
// as bytes; other bodies are hashed as bytes. The kind of body is mixed into
// the hash, so a JSON body and a byte body of the same text never collide.
//
// # Caveats
//
//   - An object that repeats a member name, case-insensitively as Go's
//     encoding/json matches names, is refused (ErrDuplicateMember): the two
//     spellings decode to one field, so keeping both would let two requests
//     that decode differently share a fingerprint. Names are compared as
//     that decoder reads them: it turns every lone surrogate escape
//     ("\ud800") into U+FFFD, so two such names, or one and "\ufffd", are
//     one field too.
//   - Numbers are compared as written: 2500 and 2500.0 are different
//     requests. Query strings are compared as sent: ?a=1&b=2 and ?b=2&a=1
//     differ.
//   - Excluded fields are matched by their exact spelling.
//   - A byte body's media type is not hashed, only that it is not JSON: the
//     same bytes sent as text/plain and as a form are one request. Hashing
//     it would change every stored fingerprint, so a retry that crossed the
//     upgrade would be refused as another request; it waits for a
//     versioned fingerprint.
package fingerprint

// Package idemhttp is the HTTP face of the ledger: a net/http middleware
// that makes POST and PATCH handlers safe to retry with an Idempotency-Key
// header.
//
//	mw, err := idemhttp.New(&idemhttp.Config{
//		Ledger: l,
//		Tenant: func(r *http.Request) (string, error) { return tenantFromAPIKey(r) },
//		Fingerprint: fingerprint.Options{Exclude: []string{"client_ts", "request_id"}},
//	})
//	mux.Handle("POST /v1/orders", mw.Wrap(createOrder))           // work inside the database
//	mux.Handle("POST /v1/orders/{id}/pay", mw.WrapExternal(pay))  // work calls a provider
//
// Wrap each route's handler (not the whole mux), so the ServeMux pattern is
// known: the scope of a key is the tenant from your own authentication plus
// the method and route pattern, so two tenants never collide and a refund key
// never matches a charge. Where no pattern names the route (another router,
// a wrapped mux) and Config.Route is nil, the URL path is the route: the
// client writes it, so a path that cannot be part of a scope is its bad
// request (400), while a tenant or a Config.Route name that cannot is the
// service's error (500, logged).
//
// # Behaviour
//
//	key missing on a route that requires one   400 application/problem+json
//	key malformed (empty, >255 bytes, not visible ASCII, repeated)   400
//	same key, same request, completed          the stored status, kept headers and
//	                                           body, byte for byte, plus
//	                                           Idempotent-Replayed: true
//	same key, different request                422
//	same key, still in progress                409 with Retry-After (or wait: Config.Wait)
//	body over Config.MaxBodyBytes (1 MiB)      413
//	URL path that cannot be part of a scope    400 request-path-invalid (only where
//	(NUL byte, about 1 KiB), no route pattern  the path is the route, see above)
//	handler panics or answers 5xx              nothing stored, writes rolled back;
//	                                           a retry runs again
//	4xx from a handler that wrote nothing      nothing stored (Stripe's rule: rejected
//	(or called DoNotStore), or 4xx body        before it executed); a corrected retry
//	over MaxStoredErrorBytes (4 KiB)           with the same key runs
//	tenant over its quota (ledger.Quota)       429 with Retry-After
//	side effect outcome unknown (external)     502 with Retry-After, nothing stored
//	retry during the side effect's backoff     503 with Retry-After (the time to its
//	                                           next attempt); no attempt is spent
//	side effect parked (needs_attention)       409 naming the state, no Retry-After:
//	                                           an operator requeues or resolves it
//	database closed (shutting down), or the    503 with Retry-After, nothing stored;
//	request's deadline passed before it ended  the same key may be resent
//	commit outcome unknown (etcd out of reach) 503 with Retry-After: the retry
//	                                           replays it if it applied
//	the database's disk is full (ENOSPC,       503 with Retry-After, nothing stored,
//	or EDQUOT)                                 logged as an error
//	a sync failed after a commit's meta page   503 with Retry-After, logged as an
//	was written (kv.ErrSyncFailed: a disk      error, to every request until the
//	that failed a write-back)                  database is reopened (a restart)
//	a page of the file could not be read       the same, nothing stored (a handler's
//	(kv.ErrReadFailed: a disk that fails its   panic that is such a fault is not
//	reads)                                     recovered as the handler's: DB.IsFault)
//
// Every problem body is RFC 9457 JSON with a stable type URI (the Problem*
// constants). "The same request" means the same fingerprint: method, concrete
// path and query (a key reused on /v1/orders/B/pay after /v1/orders/A/pay is a
// 422, never A's answer) and body, with JSON canonicalised (key order and whitespace do not matter)
// and the fields in Config.Fingerprint.Exclude ignored. A body sent with a
// Content-Encoding (gzip, say) is not the text its type names: it is
// compared as the bytes sent, so a retry must compress alike.
//
// # In-transaction routes (Wrap)
//
// The handler does its business writes through Tx(r.Context()), and the
// Tx forms of the other packages (ledger.DoTx, outbox.AddTx, ...) with it.
// A write it starts anew with r.Context() (ledger.Do, kv.DB.Update) fails
// with kv.ErrNestedTx rather than wait, for ever, for the writer its own
// request holds (kv.DB.WithinTx marks the context). Its response
// is captured and stored with the record in the same transaction, under group
// commit, and released to the client only after the commit. Stored headers
// are an allow-list: Content-Type, Content-Encoding, Location and
// Config.KeepHeaders; Set-Cookie is never stored. The first response
// carries every header the handler set, and its trailers after the body
// (a replay carries a trailer only if KeepHeaders keeps it and "Trailer").
//
// # External routes (WrapExternal)
//
// The handler validates its input and calls Perform with the intent to
// execute (package sideeffect): the key is claimed with a lease, the intent
// recorded, the provider called with a downstream key derived from the
// intent, and the completion committed only if the claim is still current.
// A request interrupted after the provider acted is finished by asking the
// provider (the retry, or the reconciler), never by calling it blindly again.
// While the provider call runs, a retry gets 409 with Retry-After, even past
// the claim's lease: the intent's own lease (sideeffect.Config.Lease, longer
// than its CallTimeout) holds it. A call that outlives that too (a provider
// that ignores its context) lets a retry take the key and the intent over
// and finish them; the first attempt's own result is then discarded, and
// its client gets what the retry stored, as a replay, or 409 with
// Retry-After while the retry runs. The log warns each time. A handler
// that panics is logged with its stack and, if it had written nothing, gets
// the 500 problem an in-transaction handler's panic gets.
//
// # Counting
//
// Every request of a protected method is reported once, rejections
// included (a request without a key that Config.KeyOptional lets through
// aside), with its Event (what happened, its status, its duration):
// counted in Stats, passed to Config.OnEvent, and heard by the database's
// observer (package observe, and the otel module), before its answer is
// written. A client (or a
// test) that has its answer finds it counted, however large the answer.
//
// # Caveats
//
//   - An in-transaction handler may run more than once per request (group
//     commit); it must not act outside its transaction (no outbound calls, no
//     metrics that must count once).
//   - Responses are buffered in memory, up to the ledger's MaxResponseBytes;
//     streaming handlers do not fit this middleware. For the same reason an
//     informational status a handler writes first (103 Early Hints, 100
//     Continue) is not sent: the final status it writes next is the answer,
//     with the headers set before the 1xx. A 101 Switching Protocols cannot
//     be stored (nor can a Respond's 1xx on an external route): the client
//     gets a 500 problem saying so and nothing is stored. The same goes for
//     an answer larger than the ledger's MaxResponseBytes.
//   - Waiting for an in-progress request works within one process only.
package idemhttp

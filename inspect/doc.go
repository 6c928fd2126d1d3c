// Package inspect reads an oncekv database for people and scripts: the
// idempotency keys, one record in detail, intents, the outbox, the inbox and
// storage statistics, as plain structs with stable JSON field names.
//
// The same queries serve two ways in: the oncekv CLI runs them on a file it
// opens read-only, and Handler serves them over HTTP from inside a running
// service — bbolt's file lock keeps a second process out of a live
// database, so that is how a running service is inspected:
//
//	h, err := inspect.Handler(db, inspect.HandlerOptions{})
//	admin := &http.Server{Addr: "127.0.0.1:8081", Handler: h}
//	go admin.ListenAndServe()
//
//	$ oncekv keys --addr http://127.0.0.1:8081
//
// Without a token the handler serves loopback callers only (by address and
// by Host header, against DNS rebinding), read-only, with stored bodies,
// payloads and provider error text redacted; ValidateAddr refuses a
// non-loopback listen address. HandlerOptions.Token adds an admin bearer
// token that unlocks the sensitive fields, the full /check and the
// operator's actions (Operator: requeue and resolve an intent, recount the
// tenants' usage, drop a damaged record, requeue one quarantined outbox
// event or all of them), which Actions also runs on a stopped service's
// file:
//
//	$ oncekv intents requeue --addr http://127.0.0.1:8081 --token "$TOKEN" ID
//	$ oncekv outbox requeue --addr http://127.0.0.1:8081 --token "$TOKEN" --all
//	$ oncekv intents resolve --db payments.db ID --state failed --reason "declined in the provider's dashboard"
//	$ oncekv recount --addr http://127.0.0.1:8081 --token "$TOKEN"
//	$ oncekv drop --db payments.db 1ac51aa700000001
//
// The token also unlocks GET /backup, a copy of the live database as of
// one read transaction (kv.DB.Backup), which Client.Backup reads:
//
//	$ oncekv backup --addr http://127.0.0.1:8081 --token "$TOKEN" --out payments.copy.db
//
// Bad parameters answer 400; /keys returns at most MaxKeysLimit records,
// and /outbox lists at most MaxListedQuarantined quarantined events (it
// counts them all).
package inspect

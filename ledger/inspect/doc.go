// Package inspect reads an oncekv database for people and scripts: the
// idempotency keys, one record in detail, intents, the outbox, the inbox and
// storage statistics, as plain structs with stable JSON field names.
//
// The same queries serve two ways in: the oncekv CLI runs them on a file it
// opens read-only, and Handler serves them over HTTP from inside a running
// service — bbolt's file lock keeps a second process out of a live
// database, so that is how a running service is inspected:
//
//	admin := &http.Server{Addr: "127.0.0.1:8081", Handler: inspect.Handler(db, inspect.HandlerOptions{})}
//	go admin.ListenAndServe()
//
//	$ oncekv keys --addr http://127.0.0.1:8081
//
// Mount the handler on a loopback address or a unix socket only: it has no
// authentication of its own. It is read-only, and stored response bodies
// and intent payloads are redacted unless HandlerOptions.ShowBodies is set.
package inspect

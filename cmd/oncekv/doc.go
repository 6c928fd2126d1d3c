// Command oncekv inspects, checks, sweeps and compacts oncekv databases, and
// runs the demo and the benchmark harness. Run `oncekv --help`.
//
// It works on the bbolt file of a service that uses oncekv: it lists
// idempotency keys, intents, the outbox and the inbox, shows each tenant's
// usage, checks consistency, sweeps expired records, compacts, backs up
// and restores the file, migrates an older format, and lets an operator
// requeue or resolve intents that need attention, drop a damaged record,
// or serve the web console. --etcd ENDPOINTS does the same on a database
// kept on etcd (package etcdkv).
//
// Commands other than demo open only an existing oncekv file: an empty or
// foreign file is refused untouched, a damaged one is reported (exit 1). A
// running service holds its file's lock; the commands then take --addr to
// ask the service's admin endpoint (inspect.Handler) instead. Output is an
// aligned table, or JSON with --json (stable field names).
//
//	go run ./cmd/oncekv demo                  # the payments service under retries and faults
//	oncekv keys --db app.db --scope 'acme|'   # what a tenant's keys hold
//	oncekv check --db app.db                  # bbolt's check and every oncekv invariant
//
// Exit status: 0 success, 1 failure, 2 bad usage.
package main

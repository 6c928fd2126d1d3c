// Package command implements the oncekv CLI, one file per command.
//
// Each command is a cobra.Command built by a newX function in its own
// file, with its flags, help and examples beside its code. Main runs the
// root with arguments and two writers and returns the exit code, so the
// tests call it in process (writing into buffers) exactly as a user runs
// the binary; results go to the first writer, progress and notes to the
// second, never mixed into --json output.
// The commands share how a database is opened (--db, --etcd, --addr for a
// running service's admin endpoint, --key-file for sealed values), how
// output is printed (an aligned table, or JSON with --json), and how an
// error becomes an exit status (1 failure, 2 bad usage). The library does
// the work (inspect, retention, kv); this package only parses, opens and
// prints.
package command

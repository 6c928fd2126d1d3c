package command

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/oncekv/oncekv/etcdkv"
	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/seal"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// lockTimeout bounds how long a command waits for a locked file, well
// under the two seconds a user should wait to learn that a service holds it.
const lockTimeout = 500 * time.Millisecond

// usageError marks bad usage (exit 2).
type usageError struct{ error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// options are the flags every command shares.
type options struct {
	db   string
	etcd string // endpoints: the database is on etcd (etcdkv) instead of a file
	// etcdPrefix is the service's prefix on etcd (etcdkv.Options.Prefix).
	etcdPrefix string
	json       bool
	addr       string
	token      string
	// keyFiles are --key-file: the keys that open sealed values (package
	// seal), the first the current one; cipher is the ring built from them.
	keyFiles []string
	cipher   *seal.Ring
	out      io.Writer   // results: tables or one JSON document
	diag     *diagWriter // progress and notes (stderr), never mixed into --json output
}

// Main runs the CLI with args and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := execute(ctx, root)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintln(stderr, "oncekv:", err)
	var ue usageError
	if errors.As(err, &ue) {
		return ExitUsage
	}
	return ExitFailure
}

// execute runs the command with bbolt's assertion panics and memory faults
// (a damaged file: a page past the end, a garbled freelist) turned into an
// error (exit 1) instead of a crash with the usage exit code. A panic
// cannot tell a damaged file from a bug, so the message names both.
func execute(ctx context.Context, root *cobra.Command) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("failed reading the database (%v): a damaged file does this (restore it from a backup; `oncekv check` lists what it can read); if the file checks clean, it is a bug in oncekv: please report it with this message", r)
		}
	}()
	return root.ExecuteContext(ctx)
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	o := &options{out: stdout, diag: newDiag(stderr)}
	root := &cobra.Command{
		Use:   "oncekv",
		Short: "Inspect, check, sweep, compact, back up and restore oncekv databases; run the demo",
		Long: `oncekv works on the bbolt file of a service that uses oncekv: it lists
idempotency keys, intents, the outbox and the inbox, shows each tenant's usage
(what quotas bound), checks consistency, sweeps expired records, compacts the
file, backs it up (from a running service too) and restores it, and lets an
operator requeue or resolve intents that need attention.
Output is an aligned table, or JSON with --json (stable field names); text
stored on behalf of others (provider errors) is printed escaped.

Commands other than demo open only an existing oncekv file: an empty or
foreign file is refused untouched, a damaged one is reported (exit 1).
--etcd ENDPOINTS works wherever --db does, on the database a service keeps
on an etcd cluster (package etcdkv; --etcd-prefix names it), except compact,
backup and restore: etcd compacts its own history and keeps its own
snapshots. prefixes lists the databases a cluster holds.

A running service holds its file's lock. Commands then take --addr to query
the service's admin endpoint (inspect.Handler) instead of the file, and
--token (or $ONCEKV_ADMIN_TOKEN) for what the endpoint keeps behind its admin
token: bodies, provider error text, check, backups, and the intent actions.

Exit status: 0 success, 1 failure, 2 bad usage.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       buildVersion(),
		Args:          cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q (see oncekv --help)", args[0])
			}
			return c.Help()
		},
	}
	root.SetVersionTemplate("oncekv {{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	root.PersistentFlags().StringVar(&o.db, "db", "", "database file")
	root.PersistentFlags().StringVar(&o.etcd, "etcd", "", "etcd endpoints (http://127.0.0.1:2379,...): the database a service keeps on etcd, instead of --db")
	root.PersistentFlags().StringVar(&o.etcdPrefix, "etcd-prefix", etcdkv.DefaultPrefix, "with --etcd: the service's key prefix (etcdkv.Options.Prefix)")
	root.PersistentFlags().BoolVar(&o.json, "json", false, "print JSON instead of a table")
	root.PersistentFlags().StringArrayVar(&o.keyFiles, "key-file", nil, "a key file (ID:HEX, see keygen) that opens sealed values; repeatable, the first is current (default $ONCEKV_KEY)")
	root.AddCommand(newKeys(o), newGet(o), newIntents(o), newOutbox(o), newInbox(o), newStats(o),
		newSweep(o), newCheck(o), newCompact(o), newBackup(o), newRestore(o), newMigrate(o), newRecount(o), newDrop(o), newRekey(o), newKeygen(o), newConsole(o), newDemo(o), newBench(o), newPrefixes(o), newVersion(o))
	return root
}

// addrFlag adds --addr and --token to a command that can talk to a running
// service's admin endpoint.
func addrFlag(c *cobra.Command, o *options) {
	c.Flags().StringVar(&o.addr, "addr", "", "query a running service's admin endpoint (http://host:port) instead of --db")
	c.Flags().StringVar(&o.token, "token", os.Getenv("ONCEKV_ADMIN_TOKEN"), "the admin endpoint's bearer token (default $ONCEKV_ADMIN_TOKEN): bodies, provider errors, check, intent actions")
}

func (o *options) client() *inspect.Client {
	return &inspect.Client{BaseURL: strings.TrimRight(o.addr, "/"), HTTP: httpClient, Token: o.token}
}

// heldError is open's error for a file a running service holds: its
// text says what to do (lockedHelp).
type heldError struct{ path string }

func (e heldError) Error() string { return lockedHelp(e.path) }

// lockedHelp explains what to do when a service holds the file.
func lockedHelp(path string) string {
	return fmt.Sprintf("%s is held by a running process (bbolt lets only one process open a database file).\n"+
		"Inspect it live through that service's admin endpoint, for example:\n"+
		"  oncekv keys --addr http://127.0.0.1:8081   (start the payments example with -admin 127.0.0.1:8081)\n"+
		"or stop the service first", path)
}

// open opens --db (or --etcd) for reading (or writing), with a short
// lock timeout.
func (o *options) open(write bool) (*kv.DB, error) {
	switch {
	case o.db != "" && o.etcd != "":
		return nil, usagef("use --db or --etcd, not both")
	case o.etcd != "":
		return o.openEtcd(write)
	case o.db == "":
		return nil, usagef("--db FILE (or --etcd ENDPOINTS) is required")
	}
	if _, err := os.Stat(o.db); err != nil {
		return nil, fmt.Errorf("open %s: %w", o.db, err)
	}
	if err := o.loadCipher(); err != nil {
		return nil, err
	}
	// RequireFormat: a maintenance command never turns an empty or foreign
	// file into a database (issue 13, item 12).
	db, err := kv.Open(o.db, &kv.Options{ReadOnly: !write, LockTimeout: lockTimeout, RequireFormat: true, Cipher: o.cipher})
	var fe *kv.FileError
	switch {
	case errors.Is(err, kv.ErrLocked):
		return nil, heldError{o.db}
	case errors.Is(err, kv.ErrNewerFormat), errors.As(err, &fe):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%s is not a readable oncekv database: %w", o.db, err)
	}
	return db, nil
}

// loadCipher builds the key ring from --key-file or $ONCEKV_KEY, unless a
// command (rekey) already did.
func (o *options) loadCipher() error {
	if o.cipher != nil {
		return nil
	}
	r, err := o.ring()
	o.cipher = r
	return err
}

// where names the database for messages: the file, or the etcd prefix.
func (o *options) where() string {
	if o.etcd != "" {
		return fmt.Sprintf("etcd %s prefix %s", o.etcd, o.etcdPrefix)
	}
	return o.db
}

// openEtcd opens the database on etcd: an existing one only
// (RequireFormat), read-only unless write.
func (o *options) openEtcd(write bool) (*kv.DB, error) {
	if err := o.loadCipher(); err != nil {
		return nil, err
	}
	b, err := etcdkv.Open(o.etcd, &etcdkv.Options{Prefix: o.etcdPrefix})
	if err != nil {
		return nil, err
	}
	db, err := kv.New(b, &kv.Options{ReadOnly: !write, RequireFormat: true, Cipher: o.cipher})
	if err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("%s: %w", o.where(), err)
	}
	return db, nil
}

// source returns what read commands query: the admin endpoint with --addr,
// else the file. The returned func closes it.
func (o *options) source() (inspect.Source, func(), error) {
	if o.addr != "" {
		if o.db != "" || o.etcd != "" {
			return nil, nil, usagef("use --db, --etcd or --addr, not two of them")
		}
		return o.client(), func() {}, nil
	}
	db, err := o.open(false)
	if err != nil {
		return nil, nil, err
	}
	in, err := inspect.New(db)
	if err != nil {
		_ = db.Close()
		return nil, nil, err
	}
	return in, func() { _ = db.Close() }, nil
}

// query runs q against the source of a read command (--addr or --db) and
// closes it afterwards.
func query[T any](o *options, q func(src inspect.Source) (T, error)) (T, error) {
	src, done, err := o.source()
	if err != nil {
		var zero T
		return zero, err
	}
	defer done()
	return q(src)
}

// emit prints v as JSON with --json, else calls table with a tabwriter.
func (o *options) emit(v any, table func(w io.Writer)) error {
	if o.json {
		enc := json.NewEncoder(o.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	tw := tabwriter.NewWriter(o.out, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

func ts(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

func tsp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return ts(*t)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/internal/atomicfile"
	"github.com/oncekv/oncekv/kv"
)

// backupClient downloads a backup: no overall timeout (a file of
// gigabytes takes what it takes; the command's context ends it), but a
// bounded wait for the copy to begin.
var backupClient = &http.Client{Transport: &http.Transport{
	Proxy:                 http.ProxyFromEnvironment,
	ResponseHeaderTimeout: 30 * time.Minute, // the service writes its local copy first
}}

func newBackup(o *options) *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:   "backup",
		Short: "Write a consistent copy of the database, from a running service or a file",
		Long: `backup writes a copy of the database as of one read transaction: every
write committed before it began and none after, while the service goes on
writing. From a running service, --addr asks its admin endpoint (the token's
holder only; the service writes its copy beside its file, then sends it);
from a stopped service's file, --db reads it directly.

The copy is checked (bbolt's structure and every oncekv invariant, as
` + "`oncekv check`" + `) before it is put at --out, which must not exist: --out
holds a whole, checked copy or nothing. oncekv restore puts it back in a
stopped service's file's place. An encrypted database's copy stays sealed and
needs the same key. An etcd cluster is backed up with etcd's own snapshots
(etcdctl snapshot save).`,
		Example: `  oncekv backup --addr http://127.0.0.1:8081 --token "$ONCEKV_ADMIN_TOKEN" --out payments-2026-12-06.db
  oncekv backup --db payments.db --out payments.copy.db`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case o.etcd != "":
				return usagef("backup copies a bbolt file; back up an etcd cluster with etcd's snapshots (etcdctl snapshot save)")
			case out == "":
				return usagef("--out FILE is required")
			case o.addr != "" && o.db != "":
				return usagef("use --addr (a running service) or --db (a stopped one's file), not both")
			case o.addr == "" && o.db == "":
				return usagef("--addr URL (a running service) or --db FILE is required")
			}
			if _, err := os.Lstat(out); err == nil {
				return fmt.Errorf("%s exists; backup writes a new file", out)
			}
			if err := o.loadCipher(); err != nil {
				return err
			}
			ctx := cmd.Context()
			copyInto := func(w io.Writer) (int64, error) {
				client := o.client()
				client.HTTP = backupClient
				return client.Backup(ctx, w)
			}
			source := o.addr
			if o.db != "" {
				db, err := o.open(false)
				if err != nil {
					var held heldError
					if errors.As(err, &held) {
						return fmt.Errorf("%s is held by a running process: back it up through its admin endpoint, for example\n"+
							"  oncekv backup --addr http://127.0.0.1:8081 --token TOKEN --out %s", o.db, out)
					}
					return err
				}
				defer func() { _ = db.Close() }()
				copyInto = func(w io.Writer) (int64, error) { return db.Backup(ctx, w) }
				source = o.db
			}
			start := time.Now()
			var problems []inspect.Problem
			o.removeLeftovers(out)
			n, err := atomicfile.Create(out, func(f *os.File) (int64, error) {
				n, err := copyInto(atomicfile.Paced(f))
				if err != nil {
					return n, err
				}
				if err := f.Sync(); err != nil {
					return n, err
				}
				problems, err = o.checkCopy(ctx, f.Name())
				if err == nil && len(problems) > 0 {
					err = fmt.Errorf("the copy fails its check (%d problems): the source may be damaged (run oncekv check on it)", len(problems))
				}
				if err != nil {
					err = fmt.Errorf("%w; the copy was not kept", err)
				}
				return n, err
			})
			if err != nil {
				for _, p := range problems {
					fmt.Fprintf(o.diag, "%s\t%s\n", p.Check, esc(p.Message))
				}
				return fmt.Errorf("backup of %s: %w", source, err)
			}
			res := struct {
				Source  string  `json:"source"`
				Out     string  `json:"out"`
				Bytes   int64   `json:"bytes"`
				Seconds float64 `json:"seconds"`
				Checked bool    `json:"checked"`
			}{source, out, n, time.Since(start).Seconds(), true}
			return o.emit(res, func(w io.Writer) {
				fmt.Fprintf(w, "backup\t%s\nfrom\t%s\nbytes\t%d\ntook\t%.1fs\nchecked\tok: no problems found\n", res.Out, res.Source, res.Bytes, res.Seconds)
			})
		},
	}
	addrFlag(c, o)
	c.Flags().StringVar(&out, "out", "", "the copy (`FILE`, must not exist)")
	return c
}

// checkCopy opens the copy at path read-only and runs oncekv check on it.
func (o *options) checkCopy(ctx context.Context, path string) ([]inspect.Problem, error) {
	db, err := kv.Open(path, &kv.Options{ReadOnly: true, LockTimeout: lockTimeout, RequireFormat: true, Cipher: o.cipher})
	if err != nil {
		return nil, fmt.Errorf("the copy does not open as a database: %w", err)
	}
	defer func() { _ = db.Close() }()
	in, err := inspect.New(db)
	if err != nil {
		return nil, err
	}
	return in.Check(ctx)
}

// removeLeftovers removes the temporary files that copies killed part way
// left beside path (atomicfile.RemoveStale: those no running copy holds),
// and says what it gave back. A failure to remove one is a note, not an
// error: the copy itself can go on.
func (o *options) removeLeftovers(path string) {
	removed, err := atomicfile.RemoveStale(filepath.Dir(path))
	var size int64
	for _, r := range removed {
		size += r.Size
		fmt.Fprintf(o.diag, "removed %s (%d bytes), left by a copy killed part way\n", esc(r.Path), r.Size)
	}
	if len(removed) > 1 {
		fmt.Fprintf(o.diag, "removed %d such files, %d bytes in all\n", len(removed), size)
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) { // no directory: the copy says so
		fmt.Fprintf(o.diag, "could not remove every file left by copies killed part way: %s\n", esc(err.Error()))
	}
}

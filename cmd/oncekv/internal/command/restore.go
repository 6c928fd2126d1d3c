package command

import (
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/oncekv/oncekv/internal/atomicfile"
)

func newRestore(o *options) *cobra.Command {
	var from string
	c := &cobra.Command{
		Use:   "restore",
		Short: "Put a backup in a stopped service's database file's place",
		Long: `restore puts a copy made by oncekv backup at --db, for a stopped service:
it checks the copy first (as oncekv check), refuses while a process holds
--db (bbolt's lock), keeps the file it replaces beside it
(FILE.replaced-TIME), and puts the copy in place with one rename, so that
--db names the old file or the whole copy at every moment, a crash
included. The copy itself is left as it is. Start the service afterwards: it comes back as it
was when the copy was made (README, "Backups and restores", says what that
means for the requests, intents and messages that came after).`,
		Example: `  oncekv restore --db payments.db --from payments-2026-12-06.db`,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case o.etcd != "":
				return usagef("restore puts a bbolt file in place; an etcd cluster is restored with etcdutl snapshot restore")
			case o.db == "" || from == "":
				return usagef("--db FILE (the service's file) and --from COPY (a backup) are required")
			}
			if err := o.loadCipher(); err != nil {
				return err
			}
			problems, err := o.checkCopy(cmd.Context(), from)
			if err == nil && len(problems) > 0 {
				for _, p := range problems {
					fmt.Fprintf(o.diag, "%s\t%s\n", p.Check, esc(p.Message))
				}
				err = fmt.Errorf("the copy fails its check (%d problems)", len(problems))
			}
			if err != nil {
				return fmt.Errorf("restore from %s: %w; %s is untouched", from, err, o.db)
			}
			kept, mode, release, err := keepAside(o.db)
			if err != nil {
				return err
			}
			defer release()
			o.removeLeftovers(o.db)
			// One rename puts the copy in place: the file's name holds the
			// old file or the whole copy at every moment, a crash included.
			n, err := atomicfile.Replace(o.db, func(f *os.File) (int64, error) {
				src, err := os.Open(from) // #nosec G304 -- the operator's own file
				if err != nil {
					return 0, err
				}
				defer func() { _ = src.Close() }()
				if err := f.Chmod(mode); err != nil { // the replaced file's mode
					return 0, err
				}
				return io.Copy(atomicfile.Paced(f), src)
			})
			if err != nil {
				if kept != "" {
					_ = os.Remove(kept) // a second name of the file still in place
				}
				return fmt.Errorf("restore to %s: %w; it is untouched", o.db, err)
			}
			res := struct {
				File     string `json:"file"`
				From     string `json:"from"`
				Bytes    int64  `json:"bytes"`
				Replaced string `json:"replaced,omitempty"`
			}{o.db, from, n, kept}
			return o.emit(res, func(w io.Writer) {
				fmt.Fprintf(w, "restored\t%s\nfrom\t%s\nbytes\t%d\n", res.File, res.From, res.Bytes)
				if res.Replaced != "" {
					fmt.Fprintf(w, "replaced\t%s (kept there: remove it once the service is back)\n", res.Replaced)
				}
				fmt.Fprintln(w, "checked\tok: no problems found in the copy; start the service")
			})
		},
	}
	c.Flags().StringVar(&from, "from", "", "the backup to restore (`COPY`, made by oncekv backup)")
	return c
}

// keepAside gives the file at path, if any, a second name,
// path.replaced-TIME, after taking bbolt's lock on it (a running service
// holds it: refused). It returns that name ("" if there was no file), the
// file's mode (0600 if none), and the release of the lock, to call once
// the copy is in place.
func keepAside(path string) (kept string, mode os.FileMode, release func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0) // #nosec G304 -- the operator's own file
	if errors.Is(err, os.ErrNotExist) {
		return "", 0o600, func() {}, nil
	}
	if err != nil {
		return "", 0, nil, fmt.Errorf("restore: %w", err)
	}
	if held, err := lockDatabase(f); held || err != nil {
		_ = f.Close()
		if held {
			return "", 0, nil, fmt.Errorf("%s is held by a running process: stop the service before restoring (bbolt's lock)", path)
		}
		return "", 0, nil, fmt.Errorf("restore: take bbolt's lock on %s: %w", path, err)
	}
	release = func() { _ = f.Close() } // closing drops the lock
	fi, err := f.Stat()
	if err != nil {
		release()
		return "", 0, nil, fmt.Errorf("restore: %w", err)
	}
	kept = path + ".replaced-" + time.Now().UTC().Format("20060102T150405.000Z")
	if err := os.Link(path, kept); err != nil {
		release()
		return "", 0, nil, fmt.Errorf("restore: keep %s as %s: %w", path, kept, err)
	}
	if !lockThroughSwap {
		release()
		release = func() {}
	}
	return kept, fi.Mode().Perm(), release, nil
}

package command

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/oncekv/oncekv/inspect"
	"github.com/oncekv/oncekv/seal"
)

// keyEnv holds a key ("ID:HEX") for commands given no --key-file.
const keyEnv = "ONCEKV_KEY"

// ring builds the key ring from --key-file (the first is current; more
// may follow, and --old-key-file for rekey), or from $ONCEKV_KEY; nil when
// no key is given: sealed values are then shown as "encrypted (key id N)".
func (o *options) ring(older ...string) (*seal.Ring, error) {
	r, err := seal.LoadRing(keyEnv, append(append([]string(nil), o.keyFiles...), older...)...)
	if err != nil {
		return nil, usagef("--key-file or $%s: %v", keyEnv, err)
	}
	return r, nil
}

func newRekey(o *options) *cobra.Command {
	var old []string
	var batch int
	c := &cobra.Command{
		Use:   "rekey",
		Short: "Re-encrypt every sealed value under a new key",
		Long: `rekey rewrites every value sealed under another key than --key-file's (stored
responses, intents, outbox payloads, sealed conditional rows) under it, so
the old keys can be retired. Values stored in clear (written before the
service had a key) are sealed too, except conditional rows of tables that
did not opt in. --old-key-file names each key the values may be under now.

It works in transactions of --batch records and is resumable: stopped at
any point, a second rekey finishes the work and skips what is done. A live
service does the same with inspect.Rekey(ctx, db, inspect.RekeyOptions{})
once it runs with the new key as current and the old ones as older.

A key file holds "ID:HEX": a key ID and 32 bytes in hex (oncekv keygen).`,
		Example: `  oncekv keygen --id 2 > key2 && chmod 600 key2
  oncekv rekey --db payments.db --key-file key2 --old-key-file key1`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if batch < 0 {
				return usagef("--batch must be positive (or 0 for the default), not %d", batch)
			}
			if len(o.keyFiles) == 0 {
				return usagef("--key-file NEW is required (the key to seal under)")
			}
			if len(o.keyFiles) > 1 {
				return usagef("give one --key-file (the new key) and each old one as --old-key-file")
			}
			ring, err := o.ring(old...)
			if err != nil {
				return err
			}
			o.cipher = ring
			db, err := o.open(true)
			if err != nil {
				return err
			}
			defer func() { _ = db.Close() }()
			start := time.Now()
			bar := newSpinner(o.diag)
			var last inspect.RekeyProgress
			n, err := inspect.Rekey(cmd.Context(), db, inspect.RekeyOptions{BatchSize: batch, Progress: func(p inspect.RekeyProgress) {
				bar.show(p)
				last = p
			}})
			bar.finish()
			var oe *seal.OpenError
			if errors.As(err, &oe) && errors.Is(err, seal.ErrUnknownKey) {
				return fmt.Errorf("%w\nsupply the key with ID %d as --old-key-file (%d values were resealed before it, kept)", err, oe.KeyID, last.Resealed)
			}
			if err != nil {
				return fmt.Errorf("%w (%d values were resealed before it, kept: run rekey again to go on)", err, last.Resealed)
			}
			res := struct {
				Where    string  `json:"database"`
				KeyID    uint32  `json:"key_id"`
				Resealed int     `json:"resealed"`
				Batches  int     `json:"batches"`
				Seconds  float64 `json:"seconds"`
			}{o.where(), ring.Current(), n, last.Batches, time.Since(start).Seconds()}
			return o.emit(res, func(w io.Writer) {
				fmt.Fprintf(w, "%s: %d values resealed under key id %d in %d batches (%.2fs)\n", res.Where, n, res.KeyID, res.Batches, res.Seconds)
			})
		},
	}
	c.Flags().StringArrayVar(&old, "old-key-file", nil, "a key the values may be sealed under now (repeatable)")
	c.Flags().IntVar(&batch, "batch", 500, "records per transaction")
	return c
}

func newKeygen(o *options) *cobra.Command {
	var id uint32
	c := &cobra.Command{
		Use:   "keygen",
		Short: "Print a new random encryption key (ID:HEX) for --key-file",
		Long: `keygen prints a new random AES-256 key as "ID:HEX", the format of --key-file
and $ONCEKV_KEY. Give every key its own ID: the ID is stored with each
sealed value, so rotation knows which key opens it. Keep the file readable
by the service's user only, and never next to the database's backups.`,
		Example: `  oncekv keygen --id 1 > key1 && chmod 600 key1`,
		Args:    noArgs,
		RunE: func(*cobra.Command, []string) error {
			_, s := seal.NewKey(id)
			_, err := fmt.Fprintln(o.out, s)
			return err
		},
	}
	c.Flags().Uint32Var(&id, "id", 1, "the key's ID")
	return c
}

// spinner shows a rekey's progress: a spinner with counts on a terminal,
// a line per kind otherwise.
type spinner struct {
	bar  *progressbar.ProgressBar
	out  io.Writer
	last inspect.RekeyProgress // the last report of the kind in progress
}

func newSpinner(out *diagWriter) *spinner {
	s := &spinner{out: out}
	if out.tty != nil {
		s.bar = progressbar.NewOptions(-1, progressbar.OptionSetWriter(out.tty), progressbar.OptionSetDescription("rekey"),
			progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
	}
	return s
}

func (s *spinner) show(p inspect.RekeyProgress) {
	if s.bar != nil {
		s.bar.Describe(fmt.Sprintf("rekey %s: %d resealed, batch", p.Kind, p.Resealed))
		_ = s.bar.Add(1)
		return
	}
	if s.last.Kind != "" && (p.Kind != s.last.Kind || p.Done) {
		// The last report of a kind holds its totals.
		fmt.Fprintf(s.out, "rekey: %s done (%d resealed so far, %d batches)\n", s.last.Kind, s.last.Resealed, s.last.Batches)
	}
	s.last = p
	if p.Done {
		s.last = inspect.RekeyProgress{}
	}
}

func (s *spinner) finish() {
	if s.bar != nil {
		_ = s.bar.Finish()
	}
}

// encryptedNote is what tables print for a sealed value read without its key.
func encryptedNote(enc string) string {
	if enc == "" {
		return ""
	}
	return " (sealed, " + enc + ")"
}

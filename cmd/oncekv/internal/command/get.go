package command

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/oncekv/oncekv/inspect"
)

func newGet(o *options) *cobra.Command {
	var scope, key string
	var body bool
	c := &cobra.Command{
		Use:   "get",
		Short: "Show one idempotency record",
		Example: `  oncekv get --db payments.db --scope 'acme|POST /v1/orders' --key create-ext-1
  oncekv get --db payments.db --scope 'acme|POST /v1/orders' --key create-ext-1 --body`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if scope == "" || key == "" {
				return usagef("--scope and --key are required")
			}
			r, err := query(o, func(src inspect.Source) (inspect.Record, error) {
				return src.Get(cmd.Context(), scope, key, body)
			})
			if errors.Is(err, inspect.ErrNotFound) {
				return fmt.Errorf("no record for key %q in scope %q", key, scope)
			}
			if err != nil {
				return err
			}
			return o.emit(r, func(w io.Writer) {
				row := func(k, v string) { fmt.Fprintf(w, "%s\t%s\n", k, v) }
				row("scope", esc(r.Scope))
				row("key", esc(r.Key.Key))
				status := r.Status
				if r.Expired {
					status += " (expired: counts as absent)"
				}
				row("status", status)
				row("version", fmt.Sprint(r.Version))
				row("owner", r.Owner)
				row("lease expires", tsp(r.LeaseExpiresAt))
				row("created", ts(r.CreatedAt))
				row("completed", tsp(r.CompletedAt))
				row("expires", ts(r.ExpiresAt))
				row("fingerprint", r.Fingerprint)
				row("stored bytes", fmt.Sprintf("%d (compressed: %t)", r.StoredBytes, r.Compressed))
				if r.Encrypted != "" {
					row("encrypted", r.Encrypted)
				}
				if r.ResponseStatus != 0 {
					row("response status", fmt.Sprint(r.ResponseStatus))
					names := make([]string, 0, len(r.Headers))
					for n := range r.Headers {
						names = append(names, n)
					}
					sort.Strings(names)
					for _, n := range names {
						row("header "+esc(n), esc(strings.Join(r.Headers[n], ", ")))
					}
					if r.Closed {
						row("headers, body", fmt.Sprintf("encrypted (%s): pass --key-file to read them", r.Encrypted))
					} else {
						row("body bytes", fmt.Sprint(r.BodyBytes))
					}
				}
				if body {
					row("body ("+dash(r.BodyEncoding)+")", r.Body)
				}
			})
		},
	}
	c.Flags().StringVar(&scope, "scope", "", "the record's `SCOPE` (tenant|METHOD /route)")
	c.Flags().StringVar(&key, "key", "", "the idempotency `KEY`")
	c.Flags().BoolVar(&body, "body", false, "show the stored body (text when printable, hex otherwise)")
	addrFlag(c, o)
	return c
}

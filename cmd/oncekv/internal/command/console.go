package command

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/oncekv/oncekv/inspect"
)

func newConsole(o *options) *cobra.Command {
	var listen string
	var write bool
	c := &cobra.Command{
		Use:   "console",
		Short: "Serve the web console for a stopped service's database, or proxy a running one's",
		Long: `console serves the web console (the same pages a service serves under
/console/ of its admin endpoint: overview, keys, records, intents, outbox,
inbox) on --listen, for the database at --db (or --etcd). The database is
opened read-only unless --write; with --write the actions (requeue and
resolve intents, requeue quarantined events) are on, behind the admin token:
--token or $ONCEKV_ADMIN_TOKEN, or a random one printed at start.

With --addr it proxies a running service's console instead (its admin
endpoint, e.g. the payments example's -admin address), so an operator on
another port reaches it the same way. It runs until interrupted.`,
		Example: `  oncekv console --db payments.db
  oncekv console --db payments.db --write
  oncekv console --addr http://127.0.0.1:8081 --listen 127.0.0.1:8090`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := inspect.ValidateAddr(listen, o.token); err != nil {
				return usagef("%v", err)
			}
			var h http.Handler
			if o.addr != "" {
				if o.db != "" || o.etcd != "" {
					return usagef("use --db, --etcd or --addr, not two of them")
				}
				u, err := url.Parse(o.addr)
				if err != nil || u.Host == "" {
					return usagef("--addr %q: want http://host:port", o.addr)
				}
				h = &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
					r.SetURL(u) // Host too: the service checks its Host header
					r.SetXForwarded()
				}}
			} else {
				db, err := o.open(write)
				if err != nil {
					return err
				}
				defer func() { _ = db.Close() }()
				tok := o.token
				if write && tok == "" {
					var b [16]byte
					_, _ = rand.Read(b[:])
					tok = hex.EncodeToString(b[:])
					fmt.Fprintf(o.diag, "admin token for this console: %s\n", tok)
				}
				if h, err = inspect.Handler(db, inspect.HandlerOptions{Token: tok}); err != nil {
					return err
				}
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
			mode := "read-only"
			if write {
				mode = "actions on, behind the admin token"
			}
			if o.addr != "" {
				mode = "proxying " + o.addr
			}
			fmt.Fprintf(o.out, "console listening on http://%s%s (%s)\n", ln.Addr(), inspect.ConsolePath, mode)
			errc := make(chan error, 1)
			go func() { errc <- srv.Serve(ln) }()
			select {
			case err := <-errc:
				return err
			case <-cmd.Context().Done():
			}
			_ = srv.Close()
			if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	c.Flags().StringVar(&listen, "listen", "127.0.0.1:8090", "address to serve the console on (loopback unless --token)")
	c.Flags().BoolVar(&write, "write", false, "open the database for writing: the actions are on (behind the admin token)")
	addrFlag(c, o)
	return c
}

package httpprovider

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/oncekv/oncekv/kv"
)

// Main is the provider program: it parses args (-addr, -db, -fail-rate,
// -lose-rate, -seed), serves until ctx ends and shuts down cleanly.
func Main(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("provider", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:9090", "listen address")
	dbPath := fs.String("db", "provider.db", "bbolt file for charges")
	failRate := fs.Float64("fail-rate", 0, "probability of answering 503 before charging")
	loseRate := fs.Float64("lose-rate", 0, "probability of charging, then dropping the connection")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "seed of the fault dice")
	if err := fs.Parse(args); err != nil {
		return err
	}
	faults := Faults{FailRate: *failRate, LoseRate: *loseRate}
	if err := faults.Validate(); err != nil {
		return err
	}
	db, err := kv.Open(*dbPath, nil)
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: New(db, faults, *seed).Handler(), ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(out, "provider listening on http://%s (db %s, fail-rate %.2f, lose-rate %.2f)\n", ln.Addr(), *dbPath, *failRate, *loseRate)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

package embedded

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// A cluster's client and peer URLs are distinct: each port is held until
// every one is chosen.
func TestFreeURLsAreDistinct(t *testing.T) {
	urls, err := freeURLs(64)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, u := range urls {
		if seen[u] {
			t.Fatalf("%s chosen twice", u)
		}
		seen[u] = true
	}
}

// On Linux, ports are drawn below the ephemeral range, where no
// connection's local port can take one before its member listens.
func TestFreeURLsAvoidTheEphemeralRange(t *testing.T) {
	lo, hi := quietPorts()
	if hi == 0 {
		t.Skip("no ephemeral range known here")
	}
	urls, err := freeURLs(16)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range urls {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		port, err := strconv.Atoi(u.Port())
		if err != nil {
			t.Fatal(err)
		}
		if port < lo || port >= hi {
			t.Fatalf("%s: port outside [%d, %d)", s, lo, hi)
		}
	}
}

// A port taken between its choice and the member's listen (CI saw "bind:
// address already in use") starts the cluster again on new ports, for a
// member in this process and for one in a process of its own.
func TestStartAgainOnATakenPort(t *testing.T) {
	for _, process := range []bool{false, true} {
		t.Run(map[bool]string{false: "embedded", true: "process"}[process], func(t *testing.T) {
			taken, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = taken.Close() }()
			takenURL := "http://" + taken.Addr().String()
			picks := 0
			pickURLs = func(n int) ([]string, error) {
				picks++
				urls, err := freeURLs(n)
				if picks == 1 && err == nil {
					urls[0] = takenURL // the first member's client URL
				}
				return urls, err
			}
			defer func() { pickURLs = freeURLs }()
			o := Options{Dir: t.TempDir(), StartTimeout: 30 * time.Second}
			if process {
				o.Process = []int{0}
			}
			c, err := Start(o)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if picks != 2 {
				t.Fatalf("ports picked %d times, want 2", picks)
			}
			if c.Endpoints() == takenURL {
				t.Fatalf("the cluster serves on the taken %s", takenURL)
			}
			cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.Endpoints()}, DialTimeout: 5 * time.Second, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cli.Close() }()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := cli.Put(ctx, "k", "v"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Start gives up after startAttempts, with an error that says why.
func TestStartGivesUpOnPortsAlwaysTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = taken.Close() }()
	picks := 0
	pickURLs = func(n int) ([]string, error) {
		picks++
		urls, err := freeURLs(n)
		if err == nil {
			urls[1] = "http://" + taken.Addr().String() // the peer URL
		}
		return urls, err
	}
	defer func() { pickURLs = freeURLs }()
	_, err = Start(Options{Dir: t.TempDir()})
	if !errors.Is(err, errPortTaken) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("err = %v, want a port taken", err)
	}
	if picks != startAttempts {
		t.Fatalf("ports picked %d times, want %d", picks, startAttempts)
	}
}

package embedded

import "testing"

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

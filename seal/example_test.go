package seal_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/oncekv/oncekv/kv"
	"github.com/oncekv/oncekv/seal"
)

// A service reads its key from a file (written by `oncekv keygen`) and
// hands the ring to kv.Open: what oncekv stores for it is then sealed.
func Example() {
	dir, _ := os.MkdirTemp("", "seal-example-")
	defer os.RemoveAll(dir)
	_, line := seal.NewKey(1) // what `oncekv keygen --id 1` prints
	keyPath := filepath.Join(dir, "key1")
	_ = os.WriteFile(keyPath, []byte(line+"\n"), 0o600)

	key, err := seal.ReadKeyFile(keyPath)
	if err != nil {
		fmt.Println(err)
		return
	}
	ring, err := seal.NewRing(key)
	if err != nil {
		fmt.Println(err)
		return
	}
	db, err := kv.Open(filepath.Join(dir, "app.db"), &kv.Options{Cipher: ring})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	fmt.Println("sealing with key", db.Cipher().Current())
	// Output: sealing with key 1
}

// Rotation: the new key seals, the old one still opens; a value bound to
// one place does not open in another.
func ExampleRing_Open() {
	oldKey, _ := seal.NewKey(1)
	newKey, _ := seal.NewKey(2)
	before, _ := seal.NewRing(oldKey)
	sealed := before.Seal(nil, []byte(`{"card":"4242"}`), []byte("orders/1"))

	after, _ := seal.NewRing(newKey, oldKey)
	plain, err := after.Open(nil, sealed, []byte("orders/1"))
	fmt.Println(string(plain), err)
	id, _ := seal.KeyID(sealed)
	fmt.Println("sealed under key", id, "- new values use key", after.Current())

	_, err = after.Open(nil, sealed, []byte("orders/2"))
	fmt.Println(errors.Is(err, seal.ErrTampered))
	retired, _ := seal.NewRing(newKey)
	_, err = retired.Open(nil, sealed, []byte("orders/1"))
	fmt.Println(err)
	// Output:
	// {"card":"4242"} <nil>
	// sealed under key 1 - new values use key 2
	// true
	// seal: sealed under a key not supplied (key 1)
}

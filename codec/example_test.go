package codec_test

import (
	"context"
	"fmt"

	"github.com/switchyard-dev/switchyard/codec"
)

// Seal and open a payload with a keyring whose active key is "2026-12";
// payloads sealed under "2026-06" still open.
func Example() {
	ring, err := codec.ParseKeys("2026-12:" + key(1) + ",2026-06:" + key(2))
	if err != nil {
		panic(err)
	}
	c, _ := codec.New(ring, nil)
	ctx := context.Background()
	sealed, _ := c.Seal(ctx, []byte(`{"doc":"q3"}`), []byte("task-1"))
	id, _ := codec.KeyID(sealed)
	plain, _ := c.Open(ctx, sealed, []byte("task-1"))
	_, err = c.Open(ctx, sealed, []byte("task-2"))
	fmt.Println(id, string(plain))
	fmt.Println(err)
	// Output:
	// 2026-12 {"doc":"q3"}
	// codec: open: key "2026-12": codec: payload does not authenticate (tampered, moved, or wrong key)
}

package switchyard_test

import (
	"os"
	"testing"

	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

// TestMain gives the AWS SDK dummy credentials when none are set (the SQS
// emulator checks none), as the adapters' own tests do.
func TestMain(m *testing.M) {
	if os.Getenv("AWS_ACCESS_KEY_ID") == "" && os.Getenv("AWS_PROFILE") == "" {
		os.Setenv("AWS_ACCESS_KEY_ID", "test")
		os.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	}
	os.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

package runtimebench

import (
	"os"
	"testing"

	"github.com/switchyard-dev/switchyard/conformance/testenv"
)

// TestMain gives the AWS SDK dummy credentials when none are set: the SQS
// raw-client row talks to the emulator, which checks none.
func TestMain(m *testing.M) {
	testenv.EmulatorAWSCredentials()
	os.Exit(m.Run())
}

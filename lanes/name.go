package lanes

import (
	"errors"
	"fmt"
)

// ErrInvalid is matched (errors.Is) by every error this package returns for
// a bad lane definition or name. Package broker re-exports it as
// broker.ErrInvalid, so code that matches broker.ErrInvalid matches these
// errors too.
var ErrInvalid = errors.New("invalid input")

// MaxNameLen is the longest lane or kind name, in bytes.
const MaxNameLen = 128

// ValidateName reports whether s is a valid lane or kind name: 1–128
// characters of letters, digits and "_.:-", not starting with punctuation.
// what names s in the error, which matches ErrInvalid. broker.ValidateName
// applies the same rule.
func ValidateName(what, s string) error {
	if s == "" {
		return nameErrorf("%s is empty", what)
	}
	if len(s) > MaxNameLen {
		return nameErrorf("%s is %d bytes, the limit is %d", what, len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '_' && c != '.' && c != ':' && c != '-') {
			return nameErrorf("%s %q has characters outside [A-Za-z0-9_.:-] or starts with punctuation", what, s)
		}
	}
	return nil
}

// nameError is ValidateName's error.
type nameError struct{ msg string }

func nameErrorf(format string, args ...any) error {
	return &nameError{msg: fmt.Sprintf(format, args...)}
}

func (e *nameError) Error() string { return e.msg }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *nameError) Is(target error) bool { return target == ErrInvalid }

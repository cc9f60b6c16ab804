package gcppubsub

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"

	"github.com/switchyard-dev/switchyard/broker"
)

// A live message's data is the Switchyard envelope (broker.EncodeEnvelope)
// of the whole message; the ordering key also travels in Pub/Sub's own
// field when the lane's subscriptions order natively.
//
// On the dead-letter topic, a message the driver put there carries the
// attribute switchyard-dead-letter=1 and its data is framed:
//
//	uvarint(len(record)) | record (JSON of broker.DeadLetter) | original data
//
// The record does not go in an attribute because Pub/Sub caps attribute
// values at 1,024 bytes. A message on the dead-letter topic without the
// attribute was moved there by Pub/Sub's own dead-letter policy, with its
// data as it was.

// attrDeadLetter marks the framed form on the dead-letter topic.
const attrDeadLetter = "switchyard-dead-letter"

// decodeLive decodes a live message's data; errors match
// broker.ErrUndecodable.
func decodeLive(data []byte) (*broker.Message, error) {
	m, err := broker.DecodeEnvelope(data)
	if err != nil {
		return nil, err
	}
	if err := broker.ValidateName("kind", m.Kind); err != nil {
		return nil, fmt.Errorf("%w: %v", broker.ErrUndecodable, err)
	}
	if err := broker.ValidateName("lane", m.Lane); err != nil {
		return nil, fmt.Errorf("%w: %v", broker.ErrUndecodable, err)
	}
	return m, nil
}

// frameDead builds the dead-letter topic's data for original with record.
func frameDead(record, original []byte) []byte {
	b := make([]byte, 0, binary.MaxVarintLen64+len(record)+len(original))
	b = binary.AppendUvarint(b, uint64(len(record)))
	b = append(b, record...)
	return append(b, original...)
}

// unframeDead splits a framed dead letter into its record and original
// data; errors match broker.ErrUndecodable.
func unframeDead(data []byte) (*broker.DeadLetter, []byte, error) {
	n, k := binary.Uvarint(data)
	if k <= 0 || n > uint64(len(data)-k) {
		return nil, nil, fmt.Errorf("%w: dead-letter frame is truncated", broker.ErrUndecodable)
	}
	rec, rest := data[k:k+int(n)], data[k+int(n):]
	dl, err := broker.DecodeDeadLetter(rec)
	if err != nil {
		return nil, nil, err
	}
	return dl, rest, nil
}

// encodeRecord encodes dl so that record plus the original data fit in
// limit bytes: older attempts go first, then the history and most of the
// error text. A record that still does not fit is ErrTooLarge.
func encodeRecord(dl *broker.DeadLetter, original, limit int) ([]byte, error) {
	rec := *dl
	for try := 0; ; try++ {
		b, err := broker.EncodeDeadLetter(&rec)
		if err != nil {
			return nil, broker.Wrap("dead-letter", broker.Permanent, err)
		}
		size := binary.MaxVarintLen64 + len(b) + original
		if size <= limit {
			return b, nil
		}
		switch try {
		case 0:
			if n := len(rec.Attempts); n > 10 {
				rec.Attempts = append([]broker.AttemptRecord{rec.Attempts[0]}, rec.Attempts[n-9:]...)
			}
			rec.Error = truncate(rec.Error, 4096)
		case 1:
			rec.Attempts = nil
			rec.Error = truncate(rec.Error, 256)
		default:
			return nil, &broker.Error{Op: "dead-letter", Class: broker.Permanent, Kind: broker.ErrTooLarge,
				Err: &broker.TooLargeError{Size: size, Max: limit}}
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s + "…"
}

package asynq

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// taskMessage mirrors asynq's internal TaskMessage (internal/proto/asynq.proto
// in hibiken/asynq v0.26.0), the protobuf stored in the "msg" field of every
// task hash. asynq keeps the type in an internal package, so the adapter
// encodes and decodes the same wire format itself with protowire. Fields
// this version does not know are kept verbatim and written back, so a newer
// asynq's fields survive a round trip through Switchyard.
type taskMessage struct {
	Type         string            // 1
	Payload      []byte            // 2
	ID           string            // 3
	Queue        string            // 4
	Retry        int32             // 5
	Retried      int32             // 6
	ErrorMsg     string            // 7
	Timeout      int64             // 8
	Deadline     int64             // 9
	UniqueKey    string            // 10
	LastFailedAt int64             // 11
	Retention    int64             // 12
	CompletedAt  int64             // 13
	GroupKey     string            // 14
	Headers      map[string]string // 15
	unknown      []byte
}

var errBadProto = errors.New("not an asynq task message")

func appendStringField(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendVarintField(b []byte, num protowire.Number, v int64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}

// encode writes m in protobuf wire format, fields in number order as
// asynq's generated code does.
func (m *taskMessage) encode() []byte {
	n := 64 + len(m.Type) + len(m.Payload) + len(m.ID) + len(m.Queue) + len(m.ErrorMsg) + len(m.UniqueKey) + len(m.GroupKey) + len(m.unknown)
	for k, v := range m.Headers {
		n += len(k) + len(v) + 8
	}
	b := make([]byte, 0, n)
	b = appendStringField(b, 1, m.Type)
	if len(m.Payload) > 0 {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, m.Payload)
	}
	b = appendStringField(b, 3, m.ID)
	b = appendStringField(b, 4, m.Queue)
	b = appendVarintField(b, 5, int64(m.Retry))
	b = appendVarintField(b, 6, int64(m.Retried))
	b = appendStringField(b, 7, m.ErrorMsg)
	b = appendVarintField(b, 8, m.Timeout)
	b = appendVarintField(b, 9, m.Deadline)
	b = appendStringField(b, 10, m.UniqueKey)
	b = appendVarintField(b, 11, m.LastFailedAt)
	b = appendVarintField(b, 12, m.Retention)
	b = appendVarintField(b, 13, m.CompletedAt)
	b = appendStringField(b, 14, m.GroupKey)
	for _, k := range sortedKeys(m.Headers) {
		var e []byte
		e = protowire.AppendTag(e, 1, protowire.BytesType)
		e = protowire.AppendString(e, k)
		e = protowire.AppendTag(e, 2, protowire.BytesType)
		e = protowire.AppendString(e, m.Headers[k])
		b = protowire.AppendTag(b, 15, protowire.BytesType)
		b = protowire.AppendBytes(b, e)
	}
	return append(b, m.unknown...)
}

// decodeTaskMessage parses asynq's TaskMessage. It never panics; any
// malformed input gives an error wrapping errBadProto.
func decodeTaskMessage(b []byte) (*taskMessage, error) {
	m := &taskMessage{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("%w: %v", errBadProto, protowire.ParseError(n))
		}
		field := b
		b = b[n:]
		var err error
		switch {
		case num == 15 && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, fmt.Errorf("%w: headers: %v", errBadProto, protowire.ParseError(n))
			}
			b = b[n:]
			k, val, err := decodeMapEntry(v)
			if err != nil {
				return nil, err
			}
			if m.Headers == nil {
				m.Headers = map[string]string{}
			}
			m.Headers[k] = val
		case num >= 1 && num <= 14 && typ == protowire.BytesType && isBytesField(num):
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, fmt.Errorf("%w: field %d: %v", errBadProto, num, protowire.ParseError(n))
			}
			b = b[n:]
			err = m.setBytes(num, v)
		case num >= 1 && num <= 14 && typ == protowire.VarintType && !isBytesField(num):
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, fmt.Errorf("%w: field %d: %v", errBadProto, num, protowire.ParseError(n))
			}
			b = b[n:]
			m.setVarint(num, v)
		case num >= 1 && num <= 15:
			return nil, fmt.Errorf("%w: field %d has wire type %d", errBadProto, num, typ)
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return nil, fmt.Errorf("%w: field %d: %v", errBadProto, num, protowire.ParseError(n))
			}
			b = b[n:]
			m.unknown = append(m.unknown, field[:len(field)-len(b)]...)
		}
		if err != nil {
			return nil, err
		}
	}
	return m, nil
}

func isBytesField(num protowire.Number) bool {
	switch num {
	case 1, 2, 3, 4, 7, 10, 14:
		return true
	}
	return false
}

func (m *taskMessage) setBytes(num protowire.Number, v []byte) error {
	if num == 2 {
		m.Payload = append([]byte(nil), v...)
		return nil
	}
	if !utf8.Valid(v) {
		return fmt.Errorf("%w: field %d is not valid UTF-8", errBadProto, num)
	}
	s := string(v)
	switch num {
	case 1:
		m.Type = s
	case 3:
		m.ID = s
	case 4:
		m.Queue = s
	case 7:
		m.ErrorMsg = s
	case 10:
		m.UniqueKey = s
	case 14:
		m.GroupKey = s
	}
	return nil
}

func (m *taskMessage) setVarint(num protowire.Number, v uint64) {
	switch num {
	case 5:
		m.Retry = int32(v)
	case 6:
		m.Retried = int32(v)
	case 8:
		m.Timeout = int64(v)
	case 9:
		m.Deadline = int64(v)
	case 11:
		m.LastFailedAt = int64(v)
	case 12:
		m.Retention = int64(v)
	case 13:
		m.CompletedAt = int64(v)
	}
}

func decodeMapEntry(b []byte) (string, string, error) {
	var k, v string
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", "", fmt.Errorf("%w: header entry: %v", errBadProto, protowire.ParseError(n))
		}
		b = b[n:]
		if (num == 1 || num == 2) && typ == protowire.BytesType {
			s, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return "", "", fmt.Errorf("%w: header entry: %v", errBadProto, protowire.ParseError(n))
			}
			b = b[n:]
			if !utf8.Valid(s) {
				return "", "", fmt.Errorf("%w: header is not valid UTF-8", errBadProto)
			}
			if num == 1 {
				k = string(s)
			} else {
				v = string(s)
			}
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return "", "", fmt.Errorf("%w: header entry: %v", errBadProto, protowire.ParseError(n))
		}
		b = b[n:]
	}
	return k, v, nil
}

package sqs

import (
	"errors"
	"net"
	"net/http"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/switchyard-dev/switchyard/broker"
)

// codeClass is the classification of one SQS (or general AWS) error code.
type codeClass struct {
	class broker.Class
	kind  error // optional specific sentinel
}

// errorCodes classifies SQS error codes. The JSON protocol reports the
// short code ("QueueDoesNotExist"); with the query-compatible header the
// SDK reports the legacy one ("AWS.SimpleQueueService.NonExistentQueue"),
// so both are listed. Codes not listed fall back on the HTTP status and
// then on "transient".
var errorCodes = map[string]codeClass{
	// Throttling, back-pressure and server faults: retry later.
	"RequestThrottled":                            {broker.Transient, nil},
	"ThrottlingException":                         {broker.Transient, nil},
	"Throttling":                                  {broker.Transient, nil},
	"ThrottledException":                          {broker.Transient, nil},
	"TooManyRequestsException":                    {broker.Transient, nil},
	"RequestLimitExceeded":                        {broker.Transient, nil},
	"KmsThrottled":                                {broker.Transient, nil},
	"KMS.ThrottlingException":                     {broker.Transient, nil},
	"OverLimit":                                   {broker.Transient, nil},
	"ServiceUnavailable":                          {broker.Transient, nil},
	"InternalError":                               {broker.Transient, nil},
	"InternalFailure":                             {broker.Transient, nil},
	"RequestTimeout":                              {broker.Transient, nil},
	"RequestTimeoutException":                     {broker.Transient, nil},
	"PurgeQueueInProgress":                        {broker.Transient, nil},
	"AWS.SimpleQueueService.PurgeQueueInProgress": {broker.Transient, nil},
	"QueueDeletedRecently":                        {broker.Transient, nil},
	"AWS.SimpleQueueService.QueueDeletedRecently": {broker.Transient, nil},
	// Credentials that expired are refreshed by the provider chain.
	"ExpiredToken":          {broker.Transient, nil},
	"ExpiredTokenException": {broker.Transient, nil},
	"RequestExpired":        {broker.Transient, nil},

	// Access: fix the credentials or the IAM policy.
	"AccessDenied":                           {broker.Permanent, nil},
	"AccessDeniedException":                  {broker.Permanent, nil},
	"InvalidClientTokenId":                   {broker.Permanent, nil},
	"UnrecognizedClientException":            {broker.Permanent, nil},
	"SignatureDoesNotMatch":                  {broker.Permanent, nil},
	"IncompleteSignature":                    {broker.Permanent, nil},
	"MissingAuthenticationToken":             {broker.Permanent, nil},
	"InvalidSecurity":                        {broker.Permanent, nil},
	"AWS.SimpleQueueService.InvalidSecurity": {broker.Permanent, nil},
	"OptInRequired":                          {broker.Permanent, nil},
	"KmsAccessDenied":                        {broker.Permanent, nil},
	"KmsDisabled":                            {broker.Permanent, nil},
	"KmsInvalidKeyUsage":                     {broker.Permanent, nil},
	"KmsInvalidState":                        {broker.Permanent, nil},
	"KmsNotFound":                            {broker.Permanent, nil},
	"KmsOptInRequired":                       {broker.Permanent, nil},

	// Validation: the request is wrong and will stay wrong.
	"ValidationException":                                 {broker.Permanent, broker.ErrInvalid},
	"ValidationError":                                     {broker.Permanent, broker.ErrInvalid},
	"InvalidParameterValue":                               {broker.Permanent, broker.ErrInvalid},
	"InvalidParameterValueException":                      {broker.Permanent, broker.ErrInvalid},
	"InvalidParameterCombination":                         {broker.Permanent, broker.ErrInvalid},
	"MissingParameter":                                    {broker.Permanent, broker.ErrInvalid},
	"InvalidAttributeName":                                {broker.Permanent, broker.ErrInvalid},
	"InvalidAttributeValue":                               {broker.Permanent, broker.ErrInvalid},
	"InvalidAddress":                                      {broker.Permanent, broker.ErrInvalid},
	"InvalidMessageContents":                              {broker.Permanent, broker.ErrInvalid},
	"InvalidBatchEntryId":                                 {broker.Permanent, broker.ErrInvalid},
	"AWS.SimpleQueueService.InvalidBatchEntryId":          {broker.Permanent, broker.ErrInvalid},
	"BatchEntryIdsNotDistinct":                            {broker.Permanent, broker.ErrInvalid},
	"AWS.SimpleQueueService.BatchEntryIdsNotDistinct":     {broker.Permanent, broker.ErrInvalid},
	"EmptyBatchRequest":                                   {broker.Permanent, broker.ErrInvalid},
	"AWS.SimpleQueueService.EmptyBatchRequest":            {broker.Permanent, broker.ErrInvalid},
	"TooManyEntriesInBatchRequest":                        {broker.Permanent, broker.ErrInvalid},
	"AWS.SimpleQueueService.TooManyEntriesInBatchRequest": {broker.Permanent, broker.ErrInvalid},
	"InvalidIdFormat":                                     {broker.Permanent, broker.ErrInvalid},
	"QueueNameExists":                                     {broker.Permanent, broker.ErrInvalid},
	"QueueAlreadyExists":                                  {broker.Permanent, broker.ErrInvalid},
	"BatchRequestTooLong":                                 {broker.Permanent, broker.ErrTooLarge},
	"AWS.SimpleQueueService.BatchRequestTooLong":          {broker.Permanent, broker.ErrTooLarge},
	"UnsupportedOperation":                                {broker.Permanent, broker.ErrUnsupported},
	"AWS.SimpleQueueService.UnsupportedOperation":         {broker.Permanent, broker.ErrUnsupported},
	"InvalidAction":                                       {broker.Permanent, broker.ErrUnsupported},
	"QueueDoesNotExist":                                   {broker.Permanent, nil},
	"AWS.SimpleQueueService.NonExistentQueue":             {broker.Permanent, nil},
	"ResourceNotFoundException":                           {broker.Permanent, nil},

	// The delivery's receipt handle no longer holds the message.
	"ReceiptHandleIsInvalid":                    {broker.Permanent, broker.ErrLeaseLost},
	"InvalidReceiptHandle":                      {broker.Permanent, broker.ErrLeaseLost},
	"MessageNotInflight":                        {broker.Permanent, broker.ErrLeaseLost},
	"AWS.SimpleQueueService.MessageNotInflight": {broker.Permanent, broker.ErrLeaseLost},
}

// classifyCode classifies an error code (from an API error or a batch
// entry) with the table, then the HTTP status, then "transient".
func classifyCode(code string, status int) codeClass {
	if c, ok := errorCodes[code]; ok {
		return c
	}
	switch {
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return codeClass{broker.Permanent, nil}
	case status == http.StatusRequestEntityTooLarge:
		return codeClass{broker.Permanent, broker.ErrTooLarge}
	}
	// 5xx, 429 and everything unrecognised.
	return codeClass{broker.Transient, nil}
}

// classify wraps an SDK error for op. The SDK has already retried it as
// far as its retryer allows, so the class tells the caller whether one more
// try later can help. Context errors stay recognisable (and transient).
// For a publish, a transport error after the request may have reached SQS
// is an unknown outcome.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	var be *broker.Error
	if errors.As(err, &be) {
		return err
	}
	if broker.IsContext(err) {
		return broker.Wrap(op, broker.Transient, err)
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		status := 0
		var re *awshttp.ResponseError
		if errors.As(err, &re) {
			status = re.HTTPStatusCode()
		}
		c := classifyCode(ae.ErrorCode(), status)
		return &broker.Error{Op: op, Class: c.class, Kind: c.kind, Err: err}
	}
	var se *smithyhttp.RequestSendError
	if errors.As(err, &se) && op == "publish" && !isDialError(err) {
		return &broker.Error{Op: op, Class: broker.UnknownOutcome, Err: err}
	}
	return broker.Wrap(op, broker.Transient, err)
}

// isDialError reports an error from connecting, where the request surely
// never reached the server.
func isDialError(err error) bool {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return true
	}
	var de *net.DNSError
	return errors.As(err, &de)
}

// entryError builds the error of one failed batch entry.
func entryError(op, code, message string, senderFault bool) error {
	c := classifyCode(code, 0)
	if _, known := errorCodes[code]; !known && senderFault {
		c = codeClass{broker.Permanent, broker.ErrInvalid}
	}
	return &broker.Error{Op: op, Class: c.class, Kind: c.kind, Err: &entryErr{code: code, msg: message}}
}

type entryErr struct{ code, msg string }

func (e *entryErr) Error() string {
	if e.msg == "" {
		return "sqs: " + e.code
	}
	return "sqs: " + e.code + ": " + e.msg
}

//! An incremental Server-Sent Events parser (WHATWG rules: LF, CRLF or CR line ends).

/// One dispatched SSE event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
    pub id: Option<String>,
}

/// Feeds bytes in, takes events out; holds only the unfinished line and event.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    /// A CR ended the last line; an LF right after it belongs to that line end.
    after_carriage_return: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
    id: Option<String>,
    /// The last `retry:` value the server asked for, in milliseconds.
    pub retry_ms: Option<u64>,
    /// The id of the last event with one, for `Last-Event-ID`.
    pub last_event_id: Option<String>,
    /// The most bytes one line plus one event's data may hold.
    limit: usize,
}

/// The most room the line buffer keeps between lines.
const KEPT_LINE_BYTES: usize = 64 << 10;

/// An event or line grew past the parser's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseTooLarge;

impl SseParser {
    pub fn new() -> Self {
        Self::with_limit(super::MAX_MESSAGE_BYTES)
    }

    pub fn with_limit(limit: usize) -> Self {
        SseParser {
            limit,
            ..Self::default()
        }
    }

    /// Forgets a half-received line and event (after a stream broke), keeping the last
    /// event id and the retry hint.
    pub fn reset_partial(&mut self) {
        self.line.clear();
        self.after_carriage_return = false;
        self.event = None;
        self.data.clear();
        self.has_data = false;
        self.id = None;
    }

    /// Consumes `bytes` and returns the events they completed; an error once a line or an
    /// event outgrows the limit (the stream is then useless). Lines are found with `memchr`
    /// and copied a run at a time: a page of a large listing is one line of hundreds of
    /// kilobytes, which a byte at a time cost the walk's thread a sixth of its CPU.
    pub fn feed(&mut self, mut bytes: &[u8]) -> Result<Vec<SseEvent>, SseTooLarge> {
        let mut events = Vec::new();
        if self.after_carriage_return && !bytes.is_empty() {
            self.after_carriage_return = false;
            if bytes[0] == b'\n' {
                bytes = &bytes[1..];
            }
        }
        while !bytes.is_empty() {
            let (run, end) = match memchr::memchr2(b'\n', b'\r', bytes) {
                Some(at) => (&bytes[..at], Some(bytes[at])),
                None => (bytes, None),
            };
            if self.line.len() + run.len() + self.data.len() > self.limit {
                return Err(SseTooLarge);
            }
            self.line.extend_from_slice(run);
            let Some(end) = end else {
                break;
            };
            bytes = &bytes[run.len() + 1..];
            self.end_line(&mut events);
            if end == b'\r' {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    Some(_) => {}
                    None => self.after_carriage_return = true,
                }
            }
        }
        Ok(events)
    }

    fn end_line(&mut self, events: &mut Vec<SseEvent>) {
        let mut buffer = std::mem::take(&mut self.line);
        self.take_line(&buffer, events);
        // The buffer's room serves the next line, up to `KEPT_LINE_BYTES`: a stream that lives
        // long (a GET stream, the legacy transport's) keeps no room for its largest event.
        if buffer.capacity() <= KEPT_LINE_BYTES {
            buffer.clear();
            self.line = buffer;
        }
    }

    fn take_line(&mut self, line: &[u8], events: &mut Vec<SseEvent>) {
        let line = String::from_utf8_lossy(line);
        if line.is_empty() {
            self.dispatch(events);
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.find(':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (&line[..], ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "id" if !value.contains('\0') => self.id = Some(value.to_string()),
            "retry" => {
                if let Ok(milliseconds) = value.parse() {
                    self.retry_ms = Some(milliseconds);
                }
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, events: &mut Vec<SseEvent>) {
        let id = self.id.take();
        if let Some(id) = &id {
            self.last_event_id = Some(id.clone());
        }
        let event = self.event.take();
        let data = std::mem::take(&mut self.data);
        let had_data = std::mem::replace(&mut self.has_data, false);
        // Events without data are only id or retry updates (or keep-alives): skip them.
        if had_data && !data.is_empty() {
            events.push(SseEvent { event, data, id });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lf_crlf_and_split_data() {
        let mut parser = SseParser::new();
        let input = b": keep-alive\r\nevent: message\r\nid: 7\r\ndata: {\"a\":\r\ndata: 1}\r\n\r\ndata: two\n\n";
        let events = parser.feed(input).expect("within the limit");
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].event.as_deref(), Some("message"));
        assert_eq!(events[0].data, "{\"a\":\n1}");
        assert_eq!(events[0].id.as_deref(), Some("7"));
        assert_eq!(events[1].data, "two");
        assert_eq!(parser.last_event_id.as_deref(), Some("7"));
    }

    #[test]
    fn handles_chunk_boundaries_and_empty_data() {
        let mut parser = SseParser::new();
        let mut events = parser.feed(b"retry: 1500\r").expect("small");
        events.extend(parser.feed(b"\ndata:\n\nda").expect("small"));
        events.extend(parser.feed(b"ta: x\r\r").expect("small"));
        assert_eq!(
            events,
            vec![SseEvent {
                event: None,
                data: "x".into(),
                id: None
            }]
        );
        assert_eq!(parser.retry_ms, Some(1500));
    }

    #[test]
    fn any_cut_of_the_stream_gives_the_same_events() {
        let long = "x".repeat(5000);
        let input = format!(
            "id: 1\r\ndata: {long}\r\n\r: note\rdata: a\ndata: b\n\nevent: message\rdata: {long}\r\r"
        );
        let whole = SseParser::new().feed(input.as_bytes()).expect("small");
        assert_eq!(whole.len(), 3);
        assert_eq!(whole[1].data, "a\nb");
        for size in [1, 2, 3, 7, 64, 4999, 5001] {
            let mut parser = SseParser::new();
            let mut events = Vec::new();
            for chunk in input.as_bytes().chunks(size) {
                events.extend(parser.feed(chunk).expect("small"));
            }
            assert_eq!(events, whole, "chunks of {size} bytes");
        }
    }

    #[test]
    fn a_long_line_leaves_no_room_behind_it() {
        let mut parser = SseParser::new();
        let long = format!("data: {}\n\n", "x".repeat(KEPT_LINE_BYTES * 4));
        assert_eq!(parser.feed(long.as_bytes()).expect("small").len(), 1);
        assert!(parser.line.capacity() <= KEPT_LINE_BYTES);
        assert!(parser.data.capacity() == 0);
        // Short lines keep their room.
        parser.feed(b"data: a\n\n").expect("small");
        assert!(parser.line.capacity() > 0);
    }

    #[test]
    fn refuses_an_event_past_the_limit() {
        let mut parser = SseParser::with_limit(16);
        assert!(parser.feed(b"data: 0123456789\n").is_ok());
        assert_eq!(parser.feed(b"data: 0123456789\n"), Err(SseTooLarge));
    }
}

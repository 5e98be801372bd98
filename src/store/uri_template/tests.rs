use super::template::*;
use crate::config::MAX_TEMPLATE_EXPRESSIONS_CEILING;

fn matches(template: &str, uri: &str) -> bool {
    UriTemplate::parse(template)
        .unwrap_or_else(|error| panic!("{template}: {error}"))
        .matches(uri)
}

#[test]
fn simple_expressions_match_unreserved_values() {
    assert!(matches("fai://modules/{id}", "fai://modules/F1"));
    assert!(matches(
        "fixture://docs/docs/{id}.md",
        "fixture://docs/docs/000001.md"
    ));
    assert!(matches("x://{a}", "x://caf%C3%A9"));
    assert!(matches("x://{x,y}", "x://1024,768"));
    assert!(!matches("fai://modules/{id}", "fai://modules/F1/extra"));
    assert!(!matches("fai://modules/{id}", "fai://other/F1"));
    assert!(!matches("x://{a}", "x://a%2"));
    assert!(!matches("x://{a}", "x://a?b"));
}

#[test]
fn reserved_and_fragment_expressions_take_reserved_characters() {
    assert!(matches("file:///{+path}", "file:///usr/share/doc/x.txt"));
    assert!(!matches("file:///{path}", "file:///usr/share"));
    assert!(matches("x://page{#section}", "x://page#intro/part,2"));
    assert!(matches("x://page{#section}", "x://page"));
    assert!(!matches("x://page{#section}", "x://page/intro"));
}

#[test]
fn label_and_path_expressions_take_their_prefixes() {
    assert!(matches("x://host/file{.ext}", "x://host/file.md"));
    assert!(matches("x://host/file{.ext}", "x://host/file"));
    assert!(matches("x://host{/a,b}", "x://host/one/two"));
    assert!(matches("x://host{/a,b}", "x://host/one"));
    assert!(!matches("x://host{/a,b}", "x://host/one/two/three"));
    assert!(!matches("x://host{/a}", "x://host-one"));
    assert!(matches("x://m{;x,y}", "x://m;x=1;y"));
    assert!(!matches("x://m{;x}", "x://m;z=1"));
}

#[test]
fn query_expressions_take_known_names_in_any_order() {
    let template = "fixture://docs/search{?q,limit}";
    assert!(matches(template, "fixture://docs/search"));
    assert!(matches(template, "fixture://docs/search?q=rust"));
    assert!(matches(template, "fixture://docs/search?q=rust&limit=5"));
    assert!(matches(template, "fixture://docs/search?limit=5&q=rust"));
    assert!(!matches(template, "fixture://docs/search?other=1"));
    assert!(!matches(template, "fixture://docs/search?q=1&q=2"));
    assert!(!matches(template, "fixture://docs/search?q"));
    assert!(matches("x://s?fixed=1{&a}", "x://s?fixed=1&a=2"));
    assert!(matches("x://s?fixed=1{&a}", "x://s?fixed=1"));
}

#[test]
fn several_expressions_backtrack_to_a_match() {
    assert!(matches("x://{a}{b}/{c}", "x://ab/c"));
    assert!(matches("x://{a}-{b}", "x://left-right"));
    assert!(matches("x://{+base}/docs{/id}{?v}", "x://a/b/docs/7?v=2"));
    assert!(!matches("x://{a}-{b}", "x://left_right"));
    // Many adjacent expressions over a long URI finish quickly (the memo).
    let template = "x://".to_string() + &"{a}".repeat(30) + "!";
    let uri = "x://".to_string() + &"a".repeat(3000);
    assert!(!matches(&template, &uri));
}

#[test]
fn bad_templates_are_errors_and_long_uris_never_match() {
    assert_eq!(
        UriTemplate::parse("x://{a"),
        Err(TemplateError::Unclosed(4))
    );
    assert_eq!(UriTemplate::parse("x://{}"), Err(TemplateError::Empty(4)));
    assert!(UriTemplate::parse("x://{a b}").is_err());
    assert!(matches("x://{id:3}", "x://abc"));
    let long = "x://".to_string() + &"a".repeat(MAX_MATCHED_URI_BYTES);
    assert!(!matches("x://{+rest}", &long));
    assert_eq!(
        UriTemplate::parse("x://a/{b}")
            .expect("parses")
            .literal_prefix(),
        "x://a/"
    );
}
#[test]
fn a_hostile_template_costs_a_bounded_match_and_no_stack() {
    // 15,000 adjacent expressions (45 KB): refused by the bounds, and matched without
    // recursion when parsed past them.
    let adjacent = "{a}".repeat(15_000);
    assert_eq!(
        UriTemplate::parse(&adjacent),
        Err(TemplateError::TooManyExpressions {
            max: MAX_TEMPLATE_EXPRESSIONS_CEILING
        })
    );
    let template = UriTemplate::parse_within(&adjacent, usize::MAX, usize::MAX).expect("parses");
    let mut budget = MatchBudget::default();
    assert!(!template.matches_within("x://unlisted", &mut budget));
    assert!(template.matches_within("aaaa", &mut MatchBudget::default()));
    // `{a}/` x 200,000 (781 KB) over the longest URI: the budget runs out, nothing else grows.
    let slashes = "{a}/".repeat(200_000);
    assert!(UriTemplate::parse(&slashes).is_err());
    let template = UriTemplate::parse_within(&slashes, usize::MAX, usize::MAX).expect("parses");
    let uri = "a/".repeat(MAX_MATCHED_URI_BYTES / 2);
    let mut budget = MatchBudget::default();
    assert!(!template.matches_within(&uri, &mut budget));
    assert!(budget.is_spent());
    // Within the bounds, the longest URI against many adjacent expressions still matches.
    let template = UriTemplate::parse(&format!("x://{}!", "{a}".repeat(64))).expect("parses");
    let uri = format!("x://{}!", "a".repeat(MAX_MATCHED_URI_BYTES - 5));
    assert!(template.matches(&uri));
}

#[test]
fn the_matcher_agrees_with_a_brute_force_search_on_small_cases() {
    let literals = ["x", "/", ".", "a", "=", "?", "&", ";", "#", "é", "a=", "/b"];
    let operators = ["", "+", "#", ".", "/", ";", "?", "&"];
    let names = ["a", "b", "a,b", "b,a"];
    let alphabet = [
        "a", "b", "/", ".", "=", "?", "&", ";", "#", "%", "4", "1", ",", "é", "x",
    ];
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = |bound: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % bound as u64) as usize
    };
    let mut matched = 0;
    for _ in 0..40_000 {
        let mut template = String::new();
        for _ in 0..next(4) + 1 {
            if next(2) == 0 {
                template.push_str(literals[next(literals.len())]);
            } else {
                template.push('{');
                template.push_str(operators[next(operators.len())]);
                template.push_str(names[next(names.len())]);
                template.push('}');
            }
        }
        let mut uri = String::new();
        for _ in 0..next(9) {
            uri.push_str(alphabet[next(alphabet.len())]);
        }
        let parsed = UriTemplate::parse(&template).expect("parses");
        let expected = reference::matches(&parsed.parts, &uri, 0);
        assert_eq!(parsed.matches(&uri), expected, "{template} against {uri:?}");
        matched += usize::from(expected);
    }
    assert!(matched > 1_000, "too few matches to compare: {matched}");
}

/// The matcher this file had before: recursive, quadratic, and right. Small cases only.
mod reference {
    use super::super::template::{Operator, Part};

    pub fn matches(parts: &[Part], uri: &str, at: usize) -> bool {
        let Some((part, rest)) = parts.split_first() else {
            return at == uri.len();
        };
        match part {
            Part::Literal(text) => {
                uri[at..].starts_with(text.as_str()) && matches(rest, uri, at + text.len())
            }
            Part::Expression { operator, names } => {
                let longest = extent(*operator, &uri[at..]);
                (0..=longest).any(|length| {
                    let end = at + length;
                    uri.is_char_boundary(end)
                        && is_expansion(*operator, names, &uri[at..end])
                        && matches(rest, uri, end)
                })
            }
        }
    }

    fn is_unreserved(c: char) -> bool {
        c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~')
    }

    fn is_reserved(c: char) -> bool {
        matches!(
            c,
            ':' | '/'
                | '?'
                | '#'
                | '['
                | ']'
                | '@'
                | '!'
                | '$'
                | '&'
                | '\''
                | '('
                | ')'
                | '*'
                | '+'
                | ','
                | ';'
                | '='
        )
    }

    /// How far, in bytes, an expansion of `operator` could reach into `text`: the run of
    /// characters any of its expansions may contain.
    fn extent(operator: Operator, text: &str) -> usize {
        let allowed = |c: char| match operator {
            Operator::Reserved | Operator::Fragment => {
                is_unreserved(c) || is_reserved(c) || c == '%' || !c.is_ascii()
            }
            Operator::Simple => is_unreserved(c) || c == '%' || c == ',',
            Operator::Label | Operator::Path => {
                is_unreserved(c) || c == '%' || c == ',' || c == '/'
            }
            Operator::PathParameter => is_unreserved(c) || matches!(c, '%' | ',' | ';' | '='),
            Operator::Query | Operator::QueryContinuation => {
                is_unreserved(c) || matches!(c, '%' | ',' | '&' | '=' | '?')
            }
        };
        text.char_indices()
            .find(|(_, c)| !allowed(*c))
            .map(|(index, _)| index)
            .unwrap_or(text.len())
    }

    /// A value of unreserved characters and `%XX` escapes (commas join a list's items).
    fn is_value(text: &str) -> bool {
        let bytes = text.as_bytes();
        let mut index = 0;
        while index < bytes.len() {
            let byte = bytes[index];
            if byte == b'%' {
                let escape = bytes.get(index + 1..index + 3);
                if !escape.is_some_and(|pair| pair.iter().all(u8::is_ascii_hexdigit)) {
                    return false;
                }
                index += 3;
            } else if is_unreserved(char::from(byte)) || byte == b',' {
                index += 1;
            } else {
                return false;
            }
        }
        true
    }

    /// Whether `text` is an expansion of one expression for some values of `names`.
    fn is_expansion(operator: Operator, names: &[String], text: &str) -> bool {
        match operator {
            Operator::Simple => is_value(text),
            // `extent` already kept to the characters allowed; escapes must still be whole.
            Operator::Reserved => percent_escapes_whole(text),
            Operator::Fragment => {
                text.is_empty() || (text.starts_with('#') && percent_escapes_whole(&text[1..]))
            }
            Operator::Label => prefixed_values(text, '.', names.len()),
            Operator::Path => prefixed_values(text, '/', names.len()),
            Operator::PathParameter => {
                text.is_empty()
                    || (text.starts_with(';') && named_pairs(&text[1..], ';', names, true))
            }
            Operator::Query => {
                text.is_empty()
                    || (text.starts_with('?') && named_pairs(&text[1..], '&', names, false))
            }
            Operator::QueryContinuation => {
                text.is_empty()
                    || (text.starts_with('&') && named_pairs(&text[1..], '&', names, false))
            }
        }
    }

    fn percent_escapes_whole(text: &str) -> bool {
        let bytes = text.as_bytes();
        bytes.iter().enumerate().all(|(index, byte)| {
            *byte != b'%'
                || bytes
                    .get(index + 1..index + 3)
                    .is_some_and(|pair| pair.iter().all(u8::is_ascii_hexdigit))
        })
    }

    /// Empty, or up to `count` values each after `separator` (a list value may hold commas).
    fn prefixed_values(text: &str, separator: char, count: usize) -> bool {
        if text.is_empty() {
            return true;
        }
        let Some(rest) = text.strip_prefix(separator) else {
            return false;
        };
        let values: Vec<&str> = rest.split(separator).collect();
        values.len() <= count && values.iter().all(|value| is_value(value))
    }

    /// `name=value` pairs joined by `separator`, each name one of `names` and at most once.
    /// With `bare_name`, a pair may be a name alone (`;x` for an empty value).
    fn named_pairs(text: &str, separator: char, names: &[String], bare_name: bool) -> bool {
        let mut seen: Vec<&str> = Vec::new();
        text.split(separator).all(|pair| {
            let (name, value) = match pair.split_once('=') {
                Some((name, value)) => (name, Some(value)),
                None if bare_name => (pair, None),
                None => return false,
            };
            let known = names.iter().any(|known| known == name) && !seen.contains(&name);
            seen.push(name);
            known && value.map_or(true, is_value)
        })
    }
}

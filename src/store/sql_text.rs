//! The states and kinds of `protocol` in SQL: each is stored as its one text (`as_str`) and read
//! back through `FromStr`, so the database, the socket and the CLI spell it alike.

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};

use crate::protocol::{
    CacheScope, ChangeKind, ConnectedTransport, Era, Kind, ServerState, TransportKind,
};

macro_rules! sql_text {
    ($($name:ty),+) => {
        $(
            impl ToSql for $name {
                fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                    Ok(ToSqlOutput::Borrowed(ValueRef::Text(self.as_str().as_bytes())))
                }
            }

            impl FromSql for $name {
                fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
                    value
                        .as_str()?
                        .parse()
                        .map_err(|error| FromSqlError::Other(Box::new(error)))
                }
            }
        )+
    };
}

sql_text!(
    ServerState,
    ChangeKind,
    Kind,
    TransportKind,
    ConnectedTransport,
    Era,
    CacheScope
);

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trips<T>(values: &[T])
    where
        T: std::fmt::Display + PartialEq + std::fmt::Debug + ToSql + FromSql,
    {
        let connection = rusqlite::Connection::open_in_memory().expect("open");
        for value in values {
            let text = value.to_string();
            let stored: String = connection
                .query_row("SELECT ?1", [value], |row| row.get(0))
                .expect("to sql");
            assert_eq!(stored, text);
            let read: T = connection
                .query_row("SELECT ?1", [&text], |row| row.get(0))
                .expect("from sql");
            assert_eq!(&read, value);
        }
    }

    #[test]
    fn every_value_has_its_one_text_in_sql() {
        round_trips(ServerState::ALL);
        round_trips(ChangeKind::ALL);
        round_trips(Kind::ALL);
        round_trips(TransportKind::ALL);
        round_trips(ConnectedTransport::ALL);
        round_trips(Era::ALL);
        round_trips(CacheScope::ALL);
    }
}

//! Clickstream, step 2: a profile per user (the record key) from their clicks (value = page).
//!
//! State: `MapState<String, u64>` "visits" (page -> visits) and `ListState<String>` "recent"
//! (the user's last 3 pages, oldest first). Each click emits key = user and value
//! `top=<page>:<n> distinct=<k> recent=<p1>,<p2>,<p3>`, where `top` is the most visited page
//! (ties go to the lexicographically smallest page) and `distinct` the number of pages seen.

use std::cmp::Reverse;

use weir_sdk::prelude::*;

/// How many recent pages the profile keeps.
const RECENT: usize = 3;

/// The operator; exported below.
#[derive(Default)]
pub struct Profile;

impl Operator for Profile {
    fn process(&mut self, ctx: &mut Context, click: Record<'_>) -> Result<()> {
        let page = click.value_str()?;

        let visits = ctx.map_state::<String, u64>("visits");
        let n = visits.get(page)?.unwrap_or(0) + 1;
        visits.put(page, &n)?;
        let counts = visits.entries()?;
        let (top, top_n) = counts
            .iter()
            .max_by_key(|(page, n)| (*n, Reverse(page.as_str())))
            .map(|(page, n)| (page.as_str(), *n))
            .unwrap_or((page, n));

        // Append (no load), then read back and trim to the last RECENT with one replace.
        let recent = ctx.list_state::<String>("recent");
        recent.add(page)?;
        let mut pages = recent.get()?;
        if pages.len() > RECENT {
            pages.drain(..pages.len() - RECENT);
            recent.update(&pages)?;
        }

        ctx.emit_display(
            click.key(),
            format_args!(
                "top={top}:{top_n} distinct={} recent={}",
                counts.len(),
                pages.join(",")
            ),
        )
    }
}

weir_sdk::export!(Profile);

#[cfg(test)]
mod tests {
    use super::*;
    use weir_sdk::testing::{Harness, Input};

    fn values(out: &[weir_sdk::testing::Output]) -> Vec<&str> {
        out.iter().map(|o| o.value_str()).collect()
    }

    #[test]
    fn profiles_a_user() {
        let mut h = Harness::<Profile>::new();
        let out = h.process([("ann", "/home"), ("ann", "/cart"), ("ann", "/home")]);
        assert_eq!(
            values(&out),
            [
                "top=/home:1 distinct=1 recent=/home",
                "top=/cart:1 distinct=2 recent=/home,/cart",
                "top=/home:2 distinct=2 recent=/home,/cart,/home",
            ]
        );
        assert!(out.iter().all(|o| o.key_str() == Some("ann")));
    }

    #[test]
    fn recent_keeps_the_last_three_across_batches() {
        let mut h = Harness::<Profile>::new();
        h.process([("ann", "/a"), ("ann", "/b"), ("ann", "/c")]);
        let out = h.process([("ann", "/d")]);
        assert_eq!(values(&out), ["top=/a:1 distinct=4 recent=/b,/c,/d"]);
        assert_eq!(h.list_state::<String>("recent", "ann"), ["/b", "/c", "/d"]);
        let out = h.process([("ann", "/e"), ("ann", "/c")]);
        assert_eq!(
            values(&out),
            [
                "top=/a:1 distinct=5 recent=/c,/d,/e",
                "top=/c:2 distinct=5 recent=/d,/e,/c"
            ]
        );
    }

    #[test]
    fn ties_go_to_the_smallest_page() {
        let mut h = Harness::<Profile>::new();
        let out = h.process([("u", "/z"), ("u", "/b"), ("u", "/z"), ("u", "/b")]);
        assert_eq!(out[1].value_str(), "top=/b:1 distinct=2 recent=/z,/b");
        assert_eq!(out[3].value_str(), "top=/b:2 distinct=2 recent=/b,/z,/b");
    }

    #[test]
    fn users_are_independent() {
        let mut h = Harness::<Profile>::new();
        let out = h.process([("ann", "/x"), ("bob", "/y"), ("ann", "/x")]);
        assert_eq!(
            values(&out),
            [
                "top=/x:1 distinct=1 recent=/x",
                "top=/y:1 distinct=1 recent=/y",
                "top=/x:2 distinct=1 recent=/x,/x"
            ]
        );
        let visits = h.map_state::<String, u64>("visits", "ann");
        assert_eq!(visits, [("/x".to_string(), 2)]);
        h.restart();
        let out = h.process([("bob", "/y")]);
        assert_eq!(values(&out), ["top=/y:2 distinct=1 recent=/y,/y"]);
    }

    #[test]
    fn a_click_without_user_is_an_error() {
        let mut h = Harness::<Profile>::new();
        let err = h
            .try_process([Input::new("/home")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("state \"visits\""), "{err}");
    }
}

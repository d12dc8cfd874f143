"""Per user, a map of visits per page and a list of the last three pages; on every click
emits ``top=<page>:<visits> distinct=<pages> recent=<last three>`` (ties for top go to the
smallest page). The same operator as ``../profile`` (Rust). (Not ``profile.py``: that is a
module of Python's standard library.)"""

import weir

RECENT = 3


class Profile(weir.Operator):
    def process(self, ctx, click):
        page = click.value_str()
        visits = ctx.map_state("visits")
        n = visits.get(page, 0) + 1
        visits.put(page, n)
        counts = visits.items()
        top, top_n = min(counts, key=lambda e: (-e[1], e[0]))

        recent = ctx.list_state("recent")
        recent.add(page)
        pages = recent.get()
        if len(pages) > RECENT:
            pages = pages[-RECENT:]
            recent.update(pages)
        ctx.emit(click.key, f"top={top}:{top_n} distinct={len(counts)} recent={','.join(pages)}")


Operator = weir.export(Profile)

"""Calendar: the owner's CalDAV calendars and iCalendar feeds — events in a range with
recurrences expanded in the calendar's zone, free time, and creating, moving, deleting events."""

"""What a run tells its reader: the page (`page`), the list of removed documents (`removed`), and
how values of the user's data are shown in messages (`shown`)."""

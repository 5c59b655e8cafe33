"""The neutral graph IR: the types models/ (readers) and quant/ (references, PTQ) share; imports neither."""
